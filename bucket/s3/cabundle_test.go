package s3_test

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/s3test"
)

// tlsStore serves the HTTP fake over TLS with a self-signed certificate
// and returns its URL and the certificate as a PEM file.
func tlsStore(t *testing.T) (url, pemFile string) {
	t.Helper()
	srv, err := fakes3.NewServer(fakes3.ServerOptions{Buckets: []string{"b"}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	ts.StartTLS()
	t.Cleanup(ts.Close)
	pemFile = filepath.Join(t.TempDir(), "ca.pem")
	block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	if err := os.WriteFile(pemFile, block, 0o600); err != nil {
		t.Fatal(err)
	}
	return ts.URL, pemFile
}

func roundTrip(t *testing.T, b bucket.Bucket) error {
	t.Helper()
	if _, err := b.Put(t.Context(), "k", []byte("v"), bucket.IfAbsent); err != nil {
		return err
	}
	obj, err := b.Get(t.Context(), "k", 0)
	if err == nil && string(obj.Body) != "v" {
		t.Fatalf("read back %q", obj.Body)
	}
	return err
}

// AWS_CA_BUNDLE is honoured with a custom HTTP client (which the SDK alone
// refuses to combine with a bundle) and without one; without the bundle the
// self-signed store is refused by TLS verification.
func TestCABundle(t *testing.T) {
	for _, c := range []struct {
		name   string
		bundle bool
		client *http.Client
	}{
		{"custom client", true, &http.Client{}},
		{"custom transport", true, &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}},
		{"sdk client", true, nil},
		{"custom client, no bundle", false, &http.Client{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			url, pemFile := tlsStore(t)
			if c.bundle {
				t.Setenv("AWS_CA_BUNDLE", pemFile)
			} else {
				t.Setenv("AWS_CA_BUNDLE", "")
			}
			b, err := s3.Open(t.Context(), bucket.Location{Bucket: "b"}, s3.Options{
				Endpoint: url, Credentials: s3test.Credentials(), HTTPClient: c.client,
			})
			if err != nil {
				t.Fatal(err)
			}
			err = roundTrip(t, b)
			if c.bundle {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var unknown x509.UnknownAuthorityError
			if !errors.As(err, &unknown) {
				t.Fatalf("without the bundle: got %v, want a TLS unknown-authority error", err)
			}
		})
	}
	if tr := http.DefaultTransport.(*http.Transport); tr.TLSClientConfig != nil && tr.TLSClientConfig.RootCAs != nil {
		t.Fatal("the bundle leaked into http.DefaultTransport")
	}
}

// A bundle that cannot be used fails Open with a message naming it.
func TestCABundleUnusable(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{bad, filepath.Join(t.TempDir(), "missing.pem")} {
		t.Setenv("AWS_CA_BUNDLE", path)
		_, err := s3.Open(t.Context(), bucket.Location{Bucket: "b"}, s3.Options{
			Endpoint: "https://127.0.0.1:1", Credentials: s3test.Credentials(), HTTPClient: &http.Client{},
		})
		if err == nil {
			t.Fatalf("%s: Open accepted it", path)
		}
	}
}
