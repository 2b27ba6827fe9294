package daemon

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/internal/serve"
)

// How long the API waits on a client. Every bound is about a client that
// is slow or gone, never about a handler: an append may take as long as
// the store needs to make it durable, a waiting read or an event stream as
// long as it follows, and no timeout here cuts it off (a stream gives each
// event its own apiWriteTimeout).
const (
	// apiHeaderTimeout bounds the request line and headers, and how long a
	// new connection may stay silent.
	apiHeaderTimeout = 10 * time.Second
	// apiBodyTimeout bounds the reading of a request body (one record, at
	// most --max-body bytes); a body that trickles in slower is refused
	// (DEED-E040) and nothing is written.
	apiBodyTimeout = 30 * time.Second
	// apiWriteTimeout bounds the writing of one answer, from its first
	// byte: a client that stops reading loses its answer.
	apiWriteTimeout = 30 * time.Second
	// apiIdleTimeout is how long a keep-alive connection may wait between
	// requests.
	apiIdleTimeout = 60 * time.Second
	// apiMaxHeaderBytes bounds a request's line and headers. deed's own
	// requests carry a few short headers (a bearer token, the fleet
	// secret, Deed-Hops and Deed-From), well under 1 KiB; a browser's
	// cookies for localhost stay under this too. Go's default of 1 MiB let
	// each connection, before any authentication, make the server hold up
	// to a MiB: 150 such connections grew the daemon by 150 MiB, and
	// --max-conns of them by a GiB. An oversize header is answered 431.
	apiMaxHeaderBytes = 16 << 10
	// DefaultMaxConns is --max-conns' default: far below the file descriptors a Go
	// process has, so that connections alone cannot exhaust them.
	DefaultMaxConns = 1024
)

// NewServer is the HTTP server of `deed run` on ln: the timeouts above,
// and at most maxConns connections (0: no cap). base is the context of
// every request. Serve the returned listener, which enforces the cap.
func NewServer(h http.Handler, ln net.Listener, maxConns int, base context.Context) (*http.Server, net.Listener) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: apiHeaderTimeout,
		IdleTimeout:       apiIdleTimeout,
		MaxHeaderBytes:    apiMaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	if maxConns > 0 {
		cl := serve.NewLimiter(ln, maxConns)
		srv.ConnState = cl.Track
		ln = cl
	}
	return srv, ln
}

// deadlineWriter bounds the writing of one answer: its first byte sets the
// connection's write deadline apiWriteTimeout ahead.
type deadlineWriter struct {
	http.ResponseWriter
	armed bool
}

func (w *deadlineWriter) arm() {
	if !w.armed {
		w.armed = true
		_ = http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Now().Add(apiWriteTimeout))
	}
}

func (w *deadlineWriter) WriteHeader(code int) {
	w.arm()
	w.ResponseWriter.WriteHeader(code)
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// SwapHandler serves with whatever handler was Set last: the starting one
// while the store is probed, the daemon's once it is open. Set one before
// serving.
type SwapHandler struct{ h atomic.Pointer[http.Handler] }

// Set makes h the handler of every request from now on.
func (s *SwapHandler) Set(h http.Handler) { s.h.Store(&h) }

func (s *SwapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// StartingHandler answers while `deed run` starts (the store probe, the
// node lease): /healthz says the process is up, /readyz that it is not
// ready, and every other request is refused with DEED-E011 (retry),
// applied "no". With cfg.WithFleetSecret, a peer's forwarded request is
// refused with a proof, so that its sender may relay the "no".
func StartingHandler(cfg APIConfig) http.Handler {
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody // a forwarded append's body is read for its proof
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSONStatus(w, http.StatusOK, map[string]any{"ok": true, "starting": true})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errcode.Errorf(errcode.CodeNodeFenced, "not ready: starting (store probe, node lease)"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(headerStarting, "true") // a peer may route the request elsewhere
		writeError(w, errcode.Errorf(errcode.CodeUnavailable, "the daemon is starting (store probe, node lease); retry"))
	})
	return guard(cfg, mux)
}
