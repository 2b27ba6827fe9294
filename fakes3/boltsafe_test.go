package fakes3_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/deedkit/deed/fakes3"
)

// Readers racing writers that grow the bbolt file: gofakes3's s3bolt hands
// out bodies that alias bbolt's memory map, so without boltSafe a remap
// under a reader crashes the process (SIGSEGV in memmove).
func TestPersistedStoreReadsDuringGrowth(t *testing.T) {
	srv, err := fakes3.NewServer(fakes3.ServerOptions{Dir: t.TempDir(), Buckets: []string{"b"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	body := bytes.Repeat([]byte("x"), 128<<10)
	put := func(key string) error {
		req, _ := http.NewRequest("PUT", hs.URL+"/b/"+key, bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("put %s: %d", key, resp.StatusCode)
		}
		return nil
	}
	for i := range 8 {
		if err := put(fmt.Sprintf("seed-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				if err := put(fmt.Sprintf("w%d-%d", w, i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for r := range 4 {
		wg.Go(func() {
			for i := range 150 {
				resp, err := http.Get(fmt.Sprintf("%s/b/seed-%d", hs.URL, (r+i)%8))
				if err != nil {
					t.Error(err)
					return
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if !bytes.Equal(got, body) {
					t.Errorf("read %d bytes, want the %d written", len(got), len(body))
					return
				}
			}
		})
	}
	wg.Wait()
}
