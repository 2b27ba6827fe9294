package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/internal/serve"
)

// apiServer serves an in-process daemon with `deed run`'s server
// (NewServer) on ln.
func apiServer(t *testing.T, m *fakes3.Mem, ln net.Listener, maxConns int, api APIConfig) (*http.Server, net.Listener) {
	t.Helper()
	if api.MaxBody == 0 {
		api.MaxBody = 1 << 20
	}
	if api.MaxLimit == 0 {
		api.MaxLimit = 1000
	}
	d := openTestDaemon(t, m.Client("a"), 2*time.Second)
	srv, sln := NewServer(d.handler(api), ln, maxConns, context.Background())
	go func() { _ = srv.Serve(sln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return srv, sln
}

// Idle clients cannot lock out /readyz: 300 connections, half of them
// keep-alive connections between requests and half silent, against a cap
// of 64. The server never holds more than the cap (without one it held
// every connection, and 2,000 of them exhausted its file descriptors), and
// /readyz still answers.
func TestIdleConnectionsDoNotBlockReadyz(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const maxConns, idle = 64, 300
	_, sln := apiServer(t, fakes3.NewMem(), ln, maxConns, APIConfig{})
	addr := ln.Addr().String()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range idle {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		if i%2 == 0 {
			// One request, then the connection stays open, idle.
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("/readyz with %d idle connections: %v", idle, err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/readyz: %d", resp.StatusCode)
	}
	cl, ok := sln.(*serve.Limiter)
	if !ok {
		t.Fatal("the API listener has no connection cap")
	}
	if n := cl.Open(); n > maxConns {
		t.Fatalf("the server holds %d connections, over the cap of %d", n, maxConns)
	}
}

// pipeListener hands out in-memory connections, so that the server's
// timeouts run on synctest's clock.
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

// A body that trickles in is cut off after apiBodyTimeout with DEED-E040,
// applied "no", and nothing is written; an idle keep-alive connection is
// closed after apiIdleTimeout, a silent one after apiHeaderTimeout.
// Without these bounds each of them held its connection (and, for the
// body, a handler) for ever.
func TestSlowClientsAreCutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		ln := newPipeListener()
		apiServer(t, m, ln, 0, APIConfig{})

		// A slow body: 10 of 1000 bytes, then one a second.
		c := ln.dial()
		defer c.Close()
		go func() {
			fmt.Fprintf(c, "POST /v1/cells/c/append HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n0123456789")
			for range 990 {
				time.Sleep(time.Second)
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
			}
		}()
		start := time.Now()
		// The daemon's own timers keep the bubble's clock going: bound
		// the wait, so that a server without the bound fails, not hangs.
		_ = c.SetReadDeadline(start.Add(apiBodyTimeout + 5*time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("slow body: no answer: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 400 || !strings.Contains(string(body), `"code":"DEED-E040"`) || !strings.Contains(string(body), `"applied":"no"`) {
			t.Fatalf("slow body: %d %s", resp.StatusCode, body)
		}
		if took := time.Since(start); took < apiBodyTimeout || took > apiBodyTimeout+time.Second {
			t.Fatalf("slow body cut off after %v, want %v", took, apiBodyTimeout)
		}
		if keys := m.Keys("cells/"); len(keys) != 0 {
			t.Fatalf("a slow body wrote %v", keys)
		}
		// Then the connection is closed: the server reads no more of the
		// body (it used to read on, the connection still open at 50 s).
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Fatalf("slow body: after the answer: %v", err)
		}
		br := bufio.NewReader(c)
		if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("slow body: the connection is still open %v after the answer (%v)", time.Since(start)-apiBodyTimeout, err)
		}

		// An idle keep-alive connection, and a silent one.
		for _, tc := range []struct {
			name    string
			request string
			limit   time.Duration
		}{
			{"idle keep-alive", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", apiIdleTimeout},
			{"silent", "", apiHeaderTimeout},
		} {
			c := ln.dial()
			br := bufio.NewReader(c)
			if tc.request != "" {
				go fmt.Fprint(c, tc.request)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
			}
			start := time.Now()
			_ = c.SetReadDeadline(start.Add(tc.limit + 5*time.Second))
			_, err := br.ReadByte()
			if err == nil {
				t.Fatalf("%s: the server sent something unasked", tc.name)
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("%s connection still open %v later, want closed within %v", tc.name, time.Since(start), tc.limit)
			}
			if took := time.Since(start); took > tc.limit+time.Second {
				t.Fatalf("%s connection closed after %v, want within %v", tc.name, took, tc.limit)
			}
			c.Close()
		}
	})
}

// An unauthenticated request gets its 401 and the connection is closed
// (Connection: close), so that a client without the token holds none.
func TestUnauthorizedConnectionIsClosed(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m, "a", APIConfig{Token: "s3cret"})
	req, _ := http.NewRequestWithContext(t.Context(), "POST", a.srv.URL+"/v1/cells/c/append", strings.NewReader("x"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || !resp.Close {
		t.Fatalf("unauthenticated: %d, Connection: close = %v; want 401 and the connection closed", resp.StatusCode, resp.Close)
	}
}

// Wrong methods on known paths answer 405 with Allow, not 404.
func TestWrongMethodIs405WithAllow(t *testing.T) {
	a := startTestDaemon(t, fakes3.NewMem(), "a", APIConfig{})
	for _, tc := range []struct{ method, path, allow string }{
		{"GET", "/v1/cells/c/append", "POST"},
		{"DELETE", "/v1/cells/c", "GET, HEAD"},
		{"POST", "/v1/cells/c/records", "GET, HEAD"},
		{"PUT", "/readyz", "GET, HEAD"},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), tc.method, a.srv.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != tc.allow || !strings.Contains(string(body), string(errcode.CodeBadRequest)) {
			t.Errorf("%s %s: %d Allow=%q %s; want 405 Allow=%q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), body, tc.allow)
		}
	}
	if st, res := a.call(t, "GET", "/v1/nothing", ""); st != 404 {
		t.Errorf("unknown path: %d %v", st, res)
	}
}

// The Bearer scheme is matched without regard to case, and a token with
// surrounding whitespace (read from a file or the environment with its
// newline) is the trimmed token, on both sides.
func TestBearerTokenSchemeAndWhitespace(t *testing.T) {
	a := startTestDaemon(t, fakes3.NewMem(), "a", APIConfig{Token: "s3cret\n"})
	for _, hdr := range []string{"Bearer s3cret", "bearer s3cret", "BEARER  s3cret", "Bearer s3cret\t"} {
		if st, res := a.call(t, "GET", "/v1/cells", "", "Authorization", hdr); st != 200 {
			t.Errorf("Authorization %q: %d %v", hdr, st, res)
		}
	}
	for _, hdr := range []string{"Bearer s3cre", "Basic s3cret", "Bearers3cret", "Bearer"} {
		if st, _ := a.call(t, "GET", "/v1/cells", "", "Authorization", hdr); st != 401 {
			t.Errorf("Authorization %q: %d, want 401", hdr, st)
		}
	}
	// The client's token, as read from a file or the environment (the
	// CLI's DEED_TOKEN), with a newline.
	c, err := client.New(a.srv.URL, client.Options{Token: "s3cret\n"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Append(t.Context(), "c", []byte("x")); err != nil {
		t.Fatalf("append with the token and its newline: %v", err)
	}
}

// An empty append is refused (DEED-E040, applied "no") and writes nothing.
func TestEmptyAppendIsRefused(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m, "a", APIConfig{})
	before := m.Counts()
	st, res := a.call(t, "POST", "/v1/cells/c/append", "")
	wantErr(t, st, res, 400, errcode.CodeBadRequest)
	if res["applied"] != "no" {
		t.Errorf("empty append: %v, want applied no", res)
	}
	if d := m.Counts().Sub(before); d.Put != 0 {
		t.Fatalf("an empty append wrote %d objects", d.Put)
	}
	if keys := m.Keys("cells/"); len(keys) != 0 {
		t.Fatalf("an empty append left %v", keys)
	}
}
