package daemon

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deedkit/deed/fakes3"
)

// A request whose headers exceed apiMaxHeaderBytes is refused with 431
// before any handler runs (with Go's default of 1 MiB, a 64 KiB header
// was read whole and answered 200), and a request with deed's own headers
// passes.
func TestOversizeHeadersAreRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	apiServer(t, fakes3.NewMem(), ln, 0, APIConfig{})
	for _, tc := range []struct {
		name string
		size int
		want int
	}{
		{"deed's own", 200, http.StatusOK},
		{"64 KiB", 64 << 10, http.StatusRequestHeaderFieldsTooLarge},
		{"1 MiB", 1 << 20, http.StatusRequestHeaderFieldsTooLarge},
	} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		go fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: %s\r\n\r\n", strings.Repeat("a", tc.size))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		resp.Body.Close()
		c.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s header: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
}

// BenchmarkHeaderFlood measures what 150 unauthenticated connections,
// each sending 1 MiB of one header line and then waiting, make the
// daemon hold (heap in use after they have sent it, in MiB).
func BenchmarkHeaderFlood(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	// The header bound is the server's: any handler shows it.
	srv, sln := NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), ln, 0, b.Context())
	go func() { _ = srv.Serve(sln) }()
	defer srv.Close()
	const conns = 150
	pad := "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + strings.Repeat("a", 1<<20)
	for range b.N {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		var wg sync.WaitGroup
		var open []net.Conn
		for range conns {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			open = append(open, c)
			wg.Go(func() {
				_ = c.SetWriteDeadline(time.Now().Add(20 * time.Second))
				_, _ = c.Write([]byte(pad)) // no end of headers: the server waits for more
			})
		}
		wg.Wait()
		time.Sleep(200 * time.Millisecond) // the server reads what was sent
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/(1<<20), "heapMiB/150conns")
		for _, c := range open {
			c.Close()
		}
	}
}
