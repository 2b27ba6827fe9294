package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/deedkit/deed/daemon"
	"github.com/deedkit/deed/errcode"
)

// certReloader serves the API's TLS certificate from --tls-cert/--tls-key and
// picks up a replaced pair without a restart: every handshake compares the
// files' modification time and size with those of the loaded pair (two
// stats), and SIGHUP forces a reload. A pair that fails to load (a key that
// does not match the certificate, because only one of the two files was
// replaced yet) keeps the previous certificate in service and is logged;
// the next handshake tries again.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu       sync.Mutex
	cert     *tls.Certificate
	certStat fileStamp
	keyStat  fileStamp
}

// fileStamp is what tells a replaced file from the loaded one.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stamp(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

// newCertReloader loads the pair once; a pair that does not load is a
// configuration error (DEED-E040) at start.
func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	if err := r.reload(); err != nil {
		return nil, errcode.Errorf(errcode.CodeBadRequest, "--tls-cert %s / --tls-key %s: %w", certFile, keyFile, err)
	}
	return r, nil
}

// reload reads the pair and, if it loads, puts it in service.
func (r *certReloader) reload() error {
	cs, err := stamp(r.certFile)
	if err != nil {
		return err
	}
	ks, err := stamp(r.keyFile)
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return err
	}
	if cert.Leaf == nil && len(cert.Certificate) > 0 {
		cert.Leaf, _ = x509.ParseCertificate(cert.Certificate[0])
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cert, r.certStat, r.keyStat = &cert, cs, ks
	return nil
}

// reloadLogged is reload for SIGHUP and changed files: a failure keeps the
// certificate in service.
func (r *certReloader) reloadLogged(why string) {
	if err := r.reload(); err != nil {
		r.log.Warn("TLS certificate not reloaded; the previous one stays in service", "why", why, "cert", r.certFile, "key", r.keyFile, "err", err)
		return
	}
	r.log.Info("TLS certificate reloaded", "why", why, "cert", r.certFile, "not_after", r.current().Leaf.NotAfter)
}

func (r *certReloader) current() *tls.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert
}

// changed reports whether either file differs from the loaded pair.
func (r *certReloader) changed() bool {
	cs, cerr := stamp(r.certFile)
	ks, kerr := stamp(r.keyFile)
	if cerr != nil || kerr != nil {
		return false // mid-replacement, or gone: keep serving what is loaded
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return !cs.mod.Equal(r.certStat.mod) || cs.size != r.certStat.size ||
		!ks.mod.Equal(r.keyStat.mod) || ks.size != r.keyStat.size
}

// getCertificate is tls.Config.GetCertificate.
func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if r.changed() {
		r.reloadLogged("files changed")
	}
	return r.current(), nil
}

// tlsConfig is the API's server configuration.
func (r *certReloader) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.getCertificate}
}

// reloadOnSIGHUP reloads the certificate on every SIGHUP until stop is
// called. While it runs, SIGHUP no longer ends the process (its default).
func reloadOnSIGHUP(r *certReloader) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ch:
				r.reloadLogged("SIGHUP")
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
		wg.Wait()
	}
}

// readTokenFile reads a bearer token from a file, so it never appears on a
// command line (ps) or in a unit's environment. Trailing whitespace (the
// newline an editor or echo adds) is not part of it; an empty token is
// refused.
func readTokenFile(path string) (string, error) { return readSecretFile("--token-file", path) }

// readSecretFile reads the one-line secret of the file flag names. A file
// other users may read is refused (secretModeError), as the embedded
// store's credentials.env is: a secret every local user can read protects
// nothing from them.
func readSecretFile(flag, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", errcode.Errorf(errcode.CodeBadRequest, "%s: %w", flag, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", errcode.Errorf(errcode.CodeBadRequest, "%s: %w", flag, err)
	}
	if err := secretModeError(path, fi); err != nil {
		return "", errcode.Errorf(errcode.CodeBadRequest, "%s %s: %v", flag, path, err)
	}
	raw, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return "", errcode.Errorf(errcode.CodeBadRequest, "%s: %w", flag, err)
	}
	if len(raw) > maxSecretFile {
		return "", errcode.Errorf(errcode.CodeBadRequest, "%s %s: over %d bytes: want one line, the secret", flag, path, maxSecretFile)
	}
	token := strings.TrimRight(string(raw), " \t\r\n")
	if token == "" {
		return "", errcode.Errorf(errcode.CodeBadRequest, "%s %s is empty", flag, path)
	}
	if strings.ContainsAny(token, "\r\n") {
		return "", errcode.Errorf(errcode.CodeBadRequest, "%s %s: want one line, the secret", flag, path)
	}
	return token, nil
}

// maxSecretFile bounds what is read of a token or secret file.
const maxSecretFile = 64 << 10

// caPool reads a PEM file of CA certificates for the client to trust.
func caPool(path string) (*x509.CertPool, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, errcode.Errorf(errcode.CodeBadRequest, "--ca-cert: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		return nil, errcode.Errorf(errcode.CodeBadRequest, "--ca-cert %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// errBothTokens is the refusal of a token given twice.
func errBothTokens() error {
	return errcode.Errorf(errcode.CodeBadRequest, "give the token once: --token-file or --token/%s, not both", envToken)
}

// minFleetSecret is the shortest fleet secret accepted: it is all that
// stands between the network and a peer's unauthenticated access.
const minFleetSecret = 16

// readFleetSecret reads --fleet-secret-file like a token file (one line,
// trailing newline ignored), refusing a secret shorter than minFleetSecret.
func readFleetSecret(path string) (string, error) {
	secret, err := readSecretFile("--fleet-secret-file", path)
	if err != nil {
		return "", err
	}
	if len(secret) < minFleetSecret {
		return "", errcode.Errorf(errcode.CodeBadRequest, "--fleet-secret-file %s: the secret has %d bytes, want at least %d", path, len(secret), minFleetSecret)
	}
	return secret, nil
}

// newPeerClient is the client that forwards requests to peers; with
// --peer-ca-cert it trusts that CA for peers that serve HTTPS.
func newPeerClient(caFile string) (*http.Client, error) {
	if caFile == "" {
		return daemon.NewPeerClient(nil), nil
	}
	pool, err := caPool(caFile)
	if err != nil {
		return nil, errcode.Wrap(err, "--peer-ca-cert")
	}
	return daemon.NewPeerClient(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), nil
}
