package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

// TestE2EDamagedStoreFile: `deed run --data-dir` and `deed fakes3 --dir` on
// a store file cut short used to serve it and die of SIGBUS on the first
// read of a page past the file's end (bbolt maps the size its meta page
// names), and on one cut to nothing to serve an empty store in its place.
// Both now exit at once with DEED-E032 naming the file, and leave the file
// as it was.
func TestE2EDamagedStoreFile(t *testing.T) {
	deedBinary(t) // skips with -short
	dataDir := t.TempDir()
	dir := filepath.Join(dataDir, "s3")
	srv, err := fakes3.NewServer(fakes3.ServerOptions{Dir: dir, Buckets: []string{defaultFakeBucket}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	for i := range 16 {
		req, _ := http.NewRequest("PUT", fmt.Sprintf("%s/%s/cells/c%02d/own.json", hs.URL, defaultFakeBucket, i), bytes.NewReader(bytes.Repeat([]byte("x"), 64<<10)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	hs.Close()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "fakes3.db")
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"truncated", whole[:len(whole)/2]},
		{"empty", nil},
	} {
		for _, command := range []string{"run", "fakes3"} {
			t.Run(c.name+"/"+command, func(t *testing.T) {
				if err := os.WriteFile(path, c.body, 0o600); err != nil {
					t.Fatal(err)
				}
				args := []string{"run", "--embedded-store", "--node", "n1", "--listen", anyPort, "--s3-listen", anyPort, "--data-dir", dataDir}
				served := embeddedBanner
				if command == "fakes3" {
					args = []string{"fakes3", "--dir", dir, "--listen", anyPort}
					served = fakeS3Banner
				}
				p := startDeed(t, []string{envBucket + "=", envToken + "="}, args...)
				select {
				case <-p.done:
				case <-time.After(20 * time.Second):
					// Still serving the damaged store: read what it held,
					// which is where a truncated file faults.
					s3 := reported(t, p, served, time.Second)
					for i := range 16 {
						if resp, err := http.Get(fmt.Sprintf("%s/%s/cells/c%02d/own.json", s3, defaultFakeBucket, i)); err == nil {
							resp.Body.Close()
						}
					}
				}
				code := p.wait(t, 20*time.Second)
				out := p.out.String()
				if code != codeExitStatus(errcode.CodeCorruptStore) || !strings.Contains(out, string(errcode.CodeCorruptStore)) || !strings.Contains(out, path) {
					t.Fatalf("%v, output:\n%s\nwant exit %d with DEED-E032 naming %s", p.cmd.ProcessState, out, codeExitStatus(errcode.CodeCorruptStore), path)
				}
				if got, _ := os.ReadFile(path); !bytes.Equal(got, c.body) {
					t.Fatalf("the refused store file changed: %d bytes, was %d", len(got), len(c.body))
				}
			})
		}
	}
}
