package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deedkit/deed/errcode"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key to
// certFile and keyFile and returns the certificate's PEM.
func selfSigned(t *testing.T, certFile, keyFile, name string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	writeReplacing(t, certFile, certPEM)
	writeReplacing(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	return certPEM
}

// writeReplacing replaces path the way deployment tools do (write a new
// file, rename it over the old one), with a modification time that differs
// from the old file's even on a coarse-grained file system.
func writeReplacing(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err == nil {
		mt := fi.ModTime().Add(2 * time.Second)
		if err := os.Chtimes(tmp, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func servedName(t *testing.T, r *certReloader) string {
	t.Helper()
	c, err := r.getCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf.Subject.CommonName
}

// The API's certificate follows its files: a replaced pair is served from
// the next handshake; a half-replaced pair (a key that does not match the
// certificate yet) keeps the previous one in service; SIGHUP reloads.
func TestCertReloaderFollowsFiles(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	selfSigned(t, certFile, keyFile, "one")
	r, err := newCertReloader(certFile, keyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got := servedName(t, r); got != "one" {
		t.Fatalf("serves %q, want one", got)
	}
	selfSigned(t, certFile, keyFile, "two")
	if got := servedName(t, r); got != "two" {
		t.Fatalf("after replacing the files: serves %q, want two", got)
	}
	// Only the certificate replaced so far: its key is still the old one.
	other := t.TempDir()
	selfSigned(t, filepath.Join(other, "c"), filepath.Join(other, "k"), "three")
	raw, _ := os.ReadFile(filepath.Join(other, "c"))
	writeReplacing(t, certFile, raw)
	if got := servedName(t, r); got != "two" {
		t.Fatalf("with a mismatched pair: serves %q, want two still", got)
	}
	raw, _ = os.ReadFile(filepath.Join(other, "k"))
	writeReplacing(t, keyFile, raw)
	if got := servedName(t, r); got != "three" {
		t.Fatalf("once the key followed: serves %q, want three", got)
	}

	// SIGHUP reloads even when the files' stamps did not change (a file
	// system that keeps no useful mtime).
	stop := reloadOnSIGHUP(r)
	defer stop()
	st, _ := os.Stat(certFile)
	kt, _ := os.Stat(keyFile)
	selfSigned(t, certFile, keyFile, "four")
	_ = os.Chtimes(certFile, st.ModTime(), st.ModTime())
	_ = os.Chtimes(keyFile, kt.ModTime(), kt.ModTime())
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.current().Leaf.Subject.CommonName != "four" {
		if time.Now().After(deadline) {
			t.Fatalf("SIGHUP did not reload: serves %q", r.current().Leaf.Subject.CommonName)
		}
		time.Sleep(10 * time.Millisecond)
	}

	if _, err := newCertReloader(certFile, filepath.Join(other, "k"), slog.New(slog.DiscardHandler)); errcode.CodeOf(err) != errcode.CodeBadRequest {
		t.Errorf("mismatched pair at start: %v, want %s", err, errcode.CodeBadRequest)
	}
}

func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ body, want string }{
		{"s3cret\n", "s3cret"},
		{"s3cret \r\n\n", "s3cret"},
		{"s3cret", "s3cret"},
	} {
		p := filepath.Join(dir, "tok")
		if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := readTokenFile(p); err != nil || got != tc.want {
			t.Errorf("token file %q: %q %v, want %q", tc.body, got, err, tc.want)
		}
	}
	for _, body := range []string{"", "\n\n", "two\nlines\n"} {
		p := filepath.Join(dir, "bad")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := readTokenFile(p); errcode.CodeOf(err) != errcode.CodeBadRequest {
			t.Errorf("token file %q: %v, want %s", body, err, errcode.CodeBadRequest)
		}
	}
	if r := deed(t, t.Context(), nil, "read", "c", "--token", "x", "--token-file", filepath.Join(dir, "tok")); r.status != 2 || !strings.Contains(r.stderr, "not both") {
		t.Errorf("--token with --token-file: exit %d %q", r.status, r.stderr)
	}
}

// The daemon over TLS, as separate processes: `deed run` with a
// self-signed certificate and a token file; the CLI trusts the certificate
// with --ca-cert and sends the token from --token-file; a replaced
// certificate is served after SIGHUP, and the token is on no command line.
func TestE2EDaemonTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, tokFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "token")
	ca1 := filepath.Join(dir, "ca1.pem")
	if err := os.WriteFile(ca1, selfSigned(t, certFile, keyFile, "one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokFile, []byte("t0ken-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startDeed(t, nil, "run", "--data-dir", filepath.Join(dir, "data"), "--listen", anyPort, "--s3-listen", anyPort,
		"--tls-cert", certFile, "--tls-key", keyFile, "--token-file", tokFile)
	base := reported(t, p, runBanner, bannerWaitLimit)
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("the banner names %s, want an https:// URL", base)
	}
	cli := func(args ...string) (int, string) {
		t.Helper()
		c := &e2eCluster{}
		return c.cli(t, append(args, "--addr", base)...)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, out := cli("append", "demo", "hello", "--ca-cert", ca1, "--token-file", tokFile)
		if st == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("append over TLS: exit %d %s\n%s", st, out, p.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st, out := cli("read", "demo", "--ca-cert", ca1, "--token-file", tokFile); st != 0 || out != "1\thello\n" {
		t.Errorf("read over TLS: exit %d %q", st, out)
	}
	if st, out := cli("read", "demo", "--ca-cert", ca1); st != 2 || !strings.HasPrefix(out, string(errcode.CodeUnauthorized)) {
		t.Errorf("read without the token: exit %d %q, want 2 and %s", st, out, errcode.CodeUnauthorized)
	}
	if st, out := cli("read", "demo", "--token-file", tokFile); st == 0 || !strings.Contains(out, "certificate") {
		t.Errorf("read without trusting the certificate: exit %d %q, want a certificate error", st, out)
	}
	if strings.Contains(strings.Join(p.cmd.Args, " "), "t0ken") {
		t.Errorf("the token is on the daemon's command line: %q", p.cmd.Args)
	}

	// Replace the pair with one from another CA and SIGHUP: the CLI trusts
	// only the new CA from then on.
	ca2 := filepath.Join(dir, "ca2.pem")
	if err := os.WriteFile(ca2, selfSigned(t, certFile, keyFile, "two"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.signal(t, syscall.SIGHUP)
	deadline = time.Now().Add(10 * time.Second)
	for {
		st, out := cli("read", "demo", "--ca-cert", ca2, "--token-file", tokFile)
		if st == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("read trusting the new certificate after SIGHUP: exit %d %s", st, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st, _ := cli("read", "demo", "--ca-cert", ca1, "--token-file", tokFile); st == 0 {
		t.Errorf("the old certificate is still served after SIGHUP")
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("drain after SIGHUP: exit %d\n%s", code, p.out.String())
	}
}
