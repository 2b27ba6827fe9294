package fakes3

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// pipeListener hands out in-memory connections (net.Pipe), so that the
// server's timeouts run on a synctest bubble's clock.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func (l *pipeListener) dial() net.Conn {
	c, s := net.Pipe()
	l.conns <- s
	return c
}

// closedWithin says whether the server closes c within limit, reading
// from br (c's reader) until it does; it gives up at limit plus a margin.
func closedWithin(t *testing.T, c net.Conn, br *bufio.Reader, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit + 5*time.Second))
	_, err := br.ReadByte()
	if err == nil {
		t.Fatal("the server sent something unasked")
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return -1
	}
	return time.Since(start)
}

// The served store closes what a client leaves open: a connection whose
// unsigned request it refused (at once: Connection: close), a keep-alive
// connection idle for serveIdleTimeout, a silent new one after
// serveHeaderTimeout; and it holds at most serveMaxConns. It used to keep
// every one of them for ever.
func TestServedStoreClosesIdleConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		creds := Credentials{AccessKeyID: "AKIDIDLE", SecretAccessKey: "idle-secret"}
		s, err := NewServer(ServerOptions{Buckets: []string{"deed"}, Credentials: &creds})
		if err != nil {
			t.Fatal(err)
		}
		ln := newPipeListener()
		s.startOn(ln)
		defer s.Close()
		open, err := NewServer(ServerOptions{Buckets: []string{"deed"}})
		if err != nil {
			t.Fatal(err)
		}
		oln := newPipeListener()
		open.startOn(oln)
		defer open.Close()

		for _, tc := range []struct {
			name, request string
			ln            *pipeListener
			status        int
			limit         time.Duration
		}{
			{"refused unsigned request", "GET /deed?list-type=2 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", ln, 403, time.Second},
			{"idle keep-alive", "GET /deed?list-type=2 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", oln, 200, serveIdleTimeout},
			{"silent", "", ln, 0, serveHeaderTimeout},
		} {
			c := tc.ln.dial()
			br := bufio.NewReader(c)
			if tc.request != "" {
				go fmt.Fprint(c, tc.request)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				if resp.StatusCode != tc.status {
					t.Fatalf("%s: %d, want %d", tc.name, resp.StatusCode, tc.status)
				}
			}
			if took := closedWithin(t, c, br, tc.limit); took < 0 || took > tc.limit+time.Second {
				t.Errorf("%s: connection closed after %v (-1: still open), want within %v", tc.name, took, tc.limit)
			}
			c.Close()
		}

		var conns []net.Conn
		for range serveMaxConns + 50 {
			conns = append(conns, ln.dial())
		}
		synctest.Wait()
		if n := s.conns.Open(); n > serveMaxConns {
			t.Errorf("%d connections open, want at most %d", n, serveMaxConns)
		}
		for _, c := range conns {
			c.Close()
		}
	})
}
