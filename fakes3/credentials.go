package fakes3

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// CredentialsFile is the name of the file, in a store's directory, that
// holds its generated credentials. It is a shell fragment, so that
// `. DIR/credentials.env` puts them in the environment where the AWS SDK
// (deed's CLI, a second daemon, the aws CLI) reads them.
const CredentialsFile = "credentials.env"

const (
	envAccessKey = "AWS_ACCESS_KEY_ID"
	envSecretKey = "AWS_SECRET_ACCESS_KEY"
)

// NewCredentials returns a fresh random key pair: an access key id of 20
// characters starting with "DEED", and a 40-character secret (240 random
// bits).
func NewCredentials() (Credentials, error) {
	id := make([]byte, 10)
	secret := make([]byte, 30)
	if _, err := rand.Read(id); err != nil {
		return Credentials{}, fmt.Errorf("generate credentials: %w", err)
	}
	if _, err := rand.Read(secret); err != nil {
		return Credentials{}, fmt.Errorf("generate credentials: %w", err)
	}
	return Credentials{
		AccessKeyID:     "DEED" + base32.StdEncoding.EncodeToString(id),
		SecretAccessKey: base64.RawURLEncoding.EncodeToString(secret),
	}, nil
}

// LoadOrCreateCredentials returns the credentials kept in dir's
// CredentialsFile, generating and writing them (mode 0600) on first use.
// created says whether they were generated now. A file that others may
// read (any group or other permission bit) is refused: it holds the only
// key to the store.
func LoadOrCreateCredentials(dir string) (c Credentials, path string, created bool, err error) {
	path = filepath.Join(dir, CredentialsFile)
	c, err = LoadCredentials(path)
	if err == nil {
		return c, path, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return Credentials{}, path, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Credentials{}, path, false, fmt.Errorf("create store dir: %w", err)
	}
	c, err = NewCredentials()
	if err != nil {
		return Credentials{}, path, false, err
	}
	// Write a temporary file and link it into place: the file appears
	// whole or not at all, and a concurrent first start cannot overwrite
	// credentials another process already handed out.
	tmp, err := os.CreateTemp(dir, ".credentials-*")
	if err != nil {
		return Credentials{}, path, false, fmt.Errorf("write credentials: %w", err)
	}
	defer os.Remove(tmp.Name())
	body := fmt.Sprintf("# Credentials of the deed store in this directory. Load them with:\n#   . %s\nexport %s=%s\nexport %s=%s\n",
		path, envAccessKey, c.AccessKeyID, envSecretKey, c.SecretAccessKey)
	_, err = tmp.WriteString(body)
	if err == nil {
		err = tmp.Chmod(0o600) // CreateTemp already uses 0600; say so explicitly
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Credentials{}, path, false, fmt.Errorf("write credentials %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			c, err = LoadCredentials(path)
			return c, path, false, err
		}
		return Credentials{}, path, false, fmt.Errorf("write credentials %s: %w", path, err)
	}
	return c, path, true, nil
}

// LoadCredentials reads a CredentialsFile. The error wraps fs.ErrNotExist
// when there is none.
func LoadCredentials(path string) (Credentials, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Credentials{}, fmt.Errorf("read credentials: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return Credentials{}, fmt.Errorf("credentials file %s has mode %04o, readable by others: chmod 600 %s", path, perm, path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return Credentials{}, fmt.Errorf("read credentials: %w", err)
	}
	var c Credentials
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok {
			return Credentials{}, fmt.Errorf("credentials file %s: bad line %q", path, line)
		}
		switch k {
		case envAccessKey:
			c.AccessKeyID = v
		case envSecretKey:
			c.SecretAccessKey = v
		}
	}
	if c.AccessKeyID == "" || c.SecretAccessKey == "" {
		return Credentials{}, fmt.Errorf("credentials file %s: want both %s and %s", path, envAccessKey, envSecretKey)
	}
	return c, nil
}
