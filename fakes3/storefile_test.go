package fakes3_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

// fillStore writes enough objects through the HTTP fake to grow its bbolt
// file well past its first pages, closes it, and returns the file's path.
func fillStore(t *testing.T, dir string) string {
	t.Helper()
	srv, err := fakes3.NewServer(fakes3.ServerOptions{Dir: dir, Buckets: []string{"b"}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	for i := range 16 {
		req, _ := http.NewRequest("PUT", fmt.Sprintf("%s/b/k%02d", hs.URL, i), bytes.NewReader(bytes.Repeat([]byte("x"), 64<<10)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("put: %d", resp.StatusCode)
		}
	}
	hs.Close()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "fakes3.db")
}

// A store file cut short, or cut to nothing, is refused with DEED-E032
// naming it (bbolt would map past its end and die of SIGBUS, or start an
// empty store in place of the lost one) and left as it was; a whole file
// opens with its objects.
func TestDamagedStoreFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := fillStore(t, dir)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fakes3.NewServer(fakes3.ServerOptions{Dir: dir})
	if err != nil {
		t.Fatalf("a whole store file: %v", err)
	}
	srv.Close()
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"empty", nil},
		{"truncated to half", whole[:len(whole)/2]},
		{"truncated to its meta pages", whole[:2*os.Getpagesize()]},
		{"garbage", bytes.Repeat([]byte{0x5a}, 3*os.Getpagesize())},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(path, c.body, 0o600); err != nil {
				t.Fatal(err)
			}
			srv, err := fakes3.NewServer(fakes3.ServerOptions{Dir: dir})
			if err == nil {
				srv.Close()
				t.Fatal("a damaged store file was opened")
			}
			if errcode.CodeOf(err) != errcode.CodeCorruptStore || !strings.Contains(err.Error(), path) {
				t.Fatalf("got %v, want DEED-E032 naming %s", err, path)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, c.body) {
				t.Fatalf("the refused store file changed: %d bytes, was %d", len(got), len(c.body))
			}
		})
	}
}
