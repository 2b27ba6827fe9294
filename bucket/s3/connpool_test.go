package s3_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/fakes3/s3test"
)

// TestConcurrentWritesReuseConnections: deed's own HTTP client keeps an
// idle connection for each of many concurrent writes, so a second wave of
// as many concurrent PUTs opens (almost) no new TCP connection. With the
// SDK's default of 10 idle connections per host, the two waves after the
// first of 64 opened 108 new ones (54 each).
func TestConcurrentWritesReuseConnections(t *testing.T) {
	const writers = 64
	var conns atomic.Int64
	var mu sync.Mutex
	arrived := 0
	gate := make(chan struct{}) // closed when a wave's writers have all arrived
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Hold each request until the whole wave is in, so that every
		// writer needs a connection of its own at the same time.
		mu.Lock()
		arrived++
		g := gate
		if arrived == writers {
			arrived = 0
			close(gate)
			gate = make(chan struct{})
		}
		mu.Unlock()
		select {
		case <-g:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("ETag", `"1"`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	b, err := s3.Open(t.Context(), bucket.Location{Bucket: "deed-test"},
		s3.Options{Endpoint: srv.URL, Region: s3.DefaultRegion, Credentials: s3test.Credentials()})
	if err != nil {
		t.Fatal(err)
	}
	wave := func() {
		var wg sync.WaitGroup
		for range writers {
			wg.Go(func() {
				if _, err := b.Put(context.Background(), "k", []byte("x"), bucket.IfAbsent); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	wave()
	first := conns.Load()
	wave()
	wave()
	// A connection goes back to the pool just after its response is read,
	// so a writer of the next wave may now and then miss it: allow a few.
	if again := conns.Load() - first; again > writers/8 {
		t.Errorf("the waves after the first opened %d new connections (first: %d), want ≤ %d", again, first, writers/8)
	}
}
