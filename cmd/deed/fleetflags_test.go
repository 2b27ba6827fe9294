package main

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/deedkit/deed/errcode"
)

// The fleet secret is read like a token file, and a short one is refused.
func TestReadFleetSecret(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content string
		want    string
		code    errcode.Code
	}{
		{"0123456789abcdef\n", "0123456789abcdef", ""},
		{"0123456789abcde\n", "", errcode.CodeBadRequest},
		{"", "", errcode.CodeBadRequest},
		{"0123456789abcdef\nsecond line\n", "", errcode.CodeBadRequest},
	} {
		path := filepath.Join(dir, "secret")
		if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readFleetSecret(path)
		if got != tc.want || errcode.CodeOf(err) != tc.code {
			t.Errorf("%q: %q %v, want %q %s", tc.content, got, err, tc.want, tc.code)
		}
	}
	if _, err := readFleetSecret(filepath.Join(dir, "missing")); errcode.CodeOf(err) != errcode.CodeBadRequest {
		t.Errorf("missing file: %v", err)
	}
}

// --peer-ca-cert makes the peer client trust that CA, and only with it
// does it reach a peer serving HTTPS under a private certificate.
func TestPeerClientTrustsPeerCA(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	plain, err := newPeerClient("")
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := plain.Get(srv.URL); err == nil {
		resp.Body.Close()
		t.Fatal("the default peer client trusted a private certificate")
	}
	trusting, err := newPeerClient(ca)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := trusting.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := newPeerClient(filepath.Join(t.TempDir(), "none.pem")); errcode.CodeOf(err) != errcode.CodeBadRequest {
		t.Errorf("missing CA file: %v", err)
	}
}
