package fakes3

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3bolt"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	bolt "go.etcd.io/bbolt"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/internal/serve"
)

// MaxBody bounds the body of one request. deed's largest object is a
// transaction or snapshot file of replication.MaxFileLen (16 MiB); twice
// that leaves room for any framing (aws-chunked) and for other clients'
// small objects, and bounds what one request, signed or not, can make the
// store hold in memory. A larger body is refused, 400 EntityTooLarge.
const MaxBody = 32 << 20

// ServerOptions configures NewServer.
type ServerOptions struct {
	// Dir persists the store in Dir/fakes3.db (gofakes3's bbolt backend);
	// "" keeps it in memory.
	Dir string
	// Buckets are created at start if they do not exist yet.
	Buckets []string
	// IgnoreConditions strips If-Match and If-None-Match from every write,
	// so the server behaves like a store that accepts the headers and
	// ignores them. It exists to prove the probe catches such a store.
	IgnoreConditions bool
	// Logger receives gofakes3's messages and the server's own; nil discards.
	Logger *slog.Logger
	// Credentials, when set, make the server check every request's AWS
	// Signature V4 against this key pair: an anonymous, wrongly signed or
	// stale request (beyond MaxClockSkew) is refused with a 403 S3 error,
	// and a signed body hash that does not match the body with 400
	// XAmzContentSHA256Mismatch. nil serves an open store, where anyone who
	// can reach the port reads and writes every key: for tests only (deed's
	// commands always set it unless asked, by name, for an open store).
	Credentials *Credentials
	// MaxClockSkew bounds how far a request's signing time may be from the
	// server's clock; 0 means DefaultMaxClockSkew.
	MaxClockSkew time.Duration
	// Latency is added before every request is served (outside any lock,
	// so requests still overlap), to stand in for the network round trip
	// to a real store in benchmarks that compare against it.
	Latency time.Duration

	// wrapBackend, in tests, wraps gofakes3's backend to watch the
	// requests the server makes of it.
	wrapBackend func(gofakes3.Backend) gofakes3.Backend
}

// Server is an S3 endpoint for tests that must go through aws-sdk-go-v2 and
// for `deed fakes3`. It is gofakes3 v1.2.0 with a middleware in front that
// adds what deed needs and gofakes3 lacks:
//
//   - If-Match on DELETE: 412 PreconditionFailed on a mismatch, 404
//     NoSuchKey on a missing key (gofakes3 ignores the header and deletes).
//   - AWS's answer to a PUT with If-Match on a missing key: 404 NoSuchKey
//     (gofakes3 answers 412), so the SDK path sees what it sees on AWS (see
//     bucket.QuirkIfMatchMissing404).
//   - Atomic check-then-act: every mutation (PUT, POST, DELETE) runs under
//     one mutex, so the middleware's own checks and gofakes3's cannot
//     interleave with another write. Bodies are read before the lock is
//     taken, so a slow client cannot stall other writers.
//   - Correct paginated listings with a delimiter (gofakes3's in-memory
//     backend repeats a common prefix across a page boundary), served from
//     an ordered index of the keys, so a LIST costs O(log n + page) and
//     not, as in gofakes3's backends, O(keys in the bucket).
//   - Conditional headers it cannot honour (on a copy, a multipart upload,
//     or If-None-Match on DELETE) are refused with 501 NotImplemented rather
//     than silently ignored.
//
// With ServerOptions.Credentials it checks AWS Signature V4 (headers or a
// presigned URL) before anything else, like S3.
//
// Errors are S3-style XML bodies. ETags are the quoted hex MD5 of the body on
// PUT, GET, HEAD and LIST alike.
type Server struct {
	opts    ServerOptions
	log     *slog.Logger
	backend gofakes3.Backend
	db      *bolt.DB // nil when in memory
	inner   http.Handler
	handler http.Handler

	// mu serialises mutations; see the type's doc.
	mu    sync.Mutex
	reqID atomic.Uint64

	lifeMu sync.Mutex
	srv    *http.Server
	conns  *serve.Limiter
	url    string
	served chan error
	closed bool
}

// NewServer builds a server and creates opts.Buckets. It does not listen:
// use Handler to mount it, or Start to serve it on an address.
func NewServer(opts ServerOptions) (*Server, error) {
	s := &Server{opts: opts, log: opts.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	var backend gofakes3.Backend
	if opts.Dir == "" {
		backend = s3mem.New()
	} else {
		if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("create fakes3 dir: %w", err)
		}
		path := filepath.Join(opts.Dir, "fakes3.db")
		if err := checkStoreFile(path); err != nil {
			return nil, err
		}
		// The timeout turns "another process has the store open" into an
		// error instead of a hang.
		db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
		if err != nil {
			return nil, fmt.Errorf("open fakes3 store %s: %w", path, err)
		}
		s.db = db
		backend = &boltSafe{Backend: s3bolt.New(db)}
	}
	if opts.wrapBackend != nil {
		backend = opts.wrapBackend(backend)
	}
	lister, err := newIndexedLister(backend)
	if err != nil {
		s.closeDB()
		return nil, fmt.Errorf("index fakes3 store: %w", err)
	}
	s.backend = lister
	for _, name := range opts.Buckets {
		if err := s.CreateBucket(name); err != nil {
			s.closeDB()
			return nil, err
		}
	}
	s.inner = gofakes3.New(s.backend,
		gofakes3.WithLogger(gofakesLog{s.log}),
		// A fake for tests must not care about the client's clock: tests
		// run in synctest bubbles and with skewed clocks on purpose, and
		// deed's safety does not depend on clocks.
		gofakes3.WithTimeSkewLimit(0),
	).Server()
	s.handler = http.HandlerFunc(s.serve)
	return s, nil
}

// CreateBucket creates a bucket if it does not exist yet.
func (s *Server) CreateBucket(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok, err := s.backend.BucketExists(name)
	if err != nil {
		return fmt.Errorf("check bucket %q: %w", name, err)
	}
	if ok {
		return nil
	}
	if err := s.backend.CreateBucket(name); err != nil {
		return fmt.Errorf("create bucket %q: %w", name, err)
	}
	return nil
}

// Handler returns the S3 API as an http.Handler (path-style addressing).
func (s *Server) Handler() http.Handler { return s.handler }

// Start listens on addr (for example "127.0.0.1:0") and serves in the
// background until Close. It returns the endpoint URL.
func (s *Server) Start(addr string) (string, error) {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.closed {
		return "", errors.New("start fakes3 server: closed")
	}
	if s.srv != nil {
		return "", fmt.Errorf("start fakes3 server: already serving at %s", s.url)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("start fakes3 server: %w", err)
	}
	s.startOn(ln)
	s.log.Info("fakes3 listening", "url", s.url, "dir", s.opts.Dir,
		"ignore_conditions", s.opts.IgnoreConditions)
	return s.url, nil
}

// The bounds on what a client of the served store can make it hold: the
// store is reachable by every local process (and by the network, with
// --listen), signed or not, so none of them is left to the client. The
// SDK's clients reuse a connection within 90 s and never take long over a
// request; deed's largest body (MaxBody) takes well under a second on any
// link the store is used over.
const (
	// serveHeaderTimeout bounds a request's line and headers, and so how
	// long a new connection may stay silent.
	serveHeaderTimeout = 10 * time.Second
	// serveReadTimeout bounds the reading of a whole request, body
	// included; serveWriteTimeout the writing of its answer.
	serveReadTimeout  = 2 * time.Minute
	serveWriteTimeout = 2 * time.Minute
	// serveIdleTimeout is how long a keep-alive connection may wait
	// between requests.
	serveIdleTimeout = 2 * time.Minute
	// serveMaxHeaderBytes bounds a request's line and headers: S3 itself
	// refuses more than 8 KiB of headers; a presigned URL is a few KiB.
	serveMaxHeaderBytes = 16 << 10
	// serveMaxConns caps the connections open at once; at the cap a new
	// one replaces the longest idle (serve.Limiter).
	serveMaxConns = 1024
)

// startOn serves on ln in the background, with the bounds above.
func (s *Server) startOn(ln net.Listener) {
	cl := serve.NewLimiter(ln, serveMaxConns)
	s.conns = cl
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: serveHeaderTimeout,
		ReadTimeout:       serveReadTimeout,
		WriteTimeout:      serveWriteTimeout,
		IdleTimeout:       serveIdleTimeout,
		MaxHeaderBytes:    serveMaxHeaderBytes,
		ConnState:         cl.Track,
		ErrorLog:          serve.ErrorLog(s.log, "fakes3"),
	}
	s.url = "http://" + ln.Addr().String()
	s.served = make(chan error, 1)
	go func() { s.served <- s.srv.Serve(cl) }()
}

// URL is the endpoint URL after Start, else "".
func (s *Server) URL() string {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	return s.url
}

// Close stops serving and closes the store. It cuts open connections
// rather than draining them: every write is committed before its response is
// sent (bbolt commits per transaction), so there is nothing to flush, and a
// graceful drain would wait on the idle connections SDK clients keep open.
// It is safe to call more than once.
func (s *Server) Close() error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.srv != nil {
		if err := s.srv.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close fakes3 server: %w", err))
		}
		if err := <-s.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("serve fakes3: %w", err))
		}
	}
	// Requests still inside the handler hold s.mu; wait for them so the
	// store is not closed under a write.
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.closeDB(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (s *Server) closeDB() error {
	if s.db == nil {
		return nil
	}
	db := s.db
	s.db = nil
	if err := db.Close(); err != nil {
		return fmt.Errorf("close fakes3 store: %w", err)
	}
	return nil
}

// serve is the middleware in front of gofakes3.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if s.opts.Latency > 0 {
		t := time.NewTimer(s.opts.Latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if c := s.opts.Credentials; c != nil {
		skew := s.opts.MaxClockSkew
		if skew == 0 {
			skew = DefaultMaxClockSkew
		}
		bodySum, aerr := verifySig(r, *c, skew, time.Now())
		if aerr == nil {
			aerr = s.boundBody(w, r)
		}
		if aerr == nil {
			aerr = checkBodySum(r, bodySum)
		}
		if aerr != nil {
			s.log.Debug("fakes3 refused request", "method", r.Method, "path", r.URL.Path, "err", aerr)
			// A refused client keeps no connection, and its body
			// (unread, or read in part) is not drained.
			w.Header().Set("Connection", "close")
			s.writeError(w, r, aerr.status, aerr.code, aerr.msg)
			return
		}
	} else if aerr := s.boundBody(w, r); aerr != nil {
		w.Header().Set("Connection", "close")
		s.writeError(w, r, aerr.status, aerr.code, aerr.msg)
		return
	}
	if r.Method != http.MethodPut && r.Method != http.MethodPost && r.Method != http.MethodDelete {
		s.inner.ServeHTTP(w, r)
		return
	}
	if s.opts.IgnoreConditions {
		r.Header.Del("If-Match")
		r.Header.Del("If-None-Match")
	}
	bkt, key := splitPath(r.URL.Path)
	ifMatch := r.Header.Get("If-Match")
	ifNoneMatch := r.Header.Get("If-None-Match")
	conditional := ifMatch != "" || ifNoneMatch != ""

	q := r.URL.Query()
	plain := key != "" && !q.Has("uploadId") && !q.Has("uploads") && !q.Has("versionId") &&
		!q.Has("partNumber") && r.Header.Get("X-Amz-Copy-Source") == ""
	if conditional && !plain {
		s.writeError(w, r, http.StatusNotImplemented, "NotImplemented",
			"conditional headers are supported only on a plain PutObject or DeleteObject")
		return
	}
	if ifNoneMatch != "" && r.Method == http.MethodDelete {
		s.writeError(w, r, http.StatusNotImplemented, "NotImplemented",
			"If-None-Match is not supported on DeleteObject")
		return
	}

	// Read the body before taking the lock, so that holding it never waits
	// on the network.
	if r.Body != nil && r.Body != http.NoBody {
		body, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			aerr := bodyError(err)
			w.Header().Set("Connection", "close")
			s.writeError(w, r, aerr.status, aerr.code, aerr.msg)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}

	s.mu.Lock()
	defer s.mu.Unlock()

	if plain && ifMatch != "" && (r.Method == http.MethodPut || r.Method == http.MethodDelete) {
		etag, exists, err := s.current(bkt, key)
		if err != nil {
			// A missing bucket or a backend failure: gofakes3 answers it.
			s.inner.ServeHTTP(w, r)
			return
		}
		switch {
		case !exists:
			s.log.Debug("fakes3 if-match on missing key", "method", r.Method, "bucket", bkt, "key", key)
			s.writeError(w, r, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
			return
		case !etagMatches(ifMatch, etag):
			s.log.Debug("fakes3 if-match mismatch", "method", r.Method, "bucket", bkt, "key", key,
				"if_match", ifMatch, "etag", etag)
			s.writeError(w, r, http.StatusPreconditionFailed, "PreconditionFailed",
				"At least one of the pre-conditions you specified did not hold")
			return
		}
		// The check above is authoritative: it runs under the lock the
		// write runs under, and it accepts every ETag spelling S3 clients
		// send (quoted, bare, "*", a list), which gofakes3's own check
		// does not.
		r.Header.Del("If-Match")
	}
	s.inner.ServeHTTP(w, r)
}

// boundBody refuses a body declared larger than MaxBody, unread, and
// bounds the reading of one of unknown length to MaxBody.
func (s *Server) boundBody(w http.ResponseWriter, r *http.Request) *authError {
	if r.ContentLength > MaxBody {
		return &authError{status: http.StatusBadRequest, code: "EntityTooLarge",
			msg: fmt.Sprintf("a request body of %d bytes exceeds this store's limit of %d", r.ContentLength, MaxBody)}
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
	}
	return nil
}

// current returns the quoted ETag of bkt/key and whether it exists.
func (s *Server) current(bkt, key string) (etag string, exists bool, err error) {
	obj, err := s.backend.HeadObject(bkt, key)
	if gofakes3.HasErrorCode(err, gofakes3.ErrNoSuchKey) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if obj.Contents != nil {
		_ = obj.Contents.Close()
	}
	return gofakes3.FormatETag(obj.Hash), true, nil
}

// etagMatches implements If-Match: "*" matches any existing object; a list
// matches if any member does; comparison ignores quotes
// (bucket.QuirkETagQuoting).
func etagMatches(header, etag string) bool {
	for _, want := range strings.Split(header, ",") {
		want = strings.TrimSpace(want)
		if want == "*" || bucket.SameETag(want, etag) {
			return true
		}
	}
	return false
}

func splitPath(p string) (bkt, key string) {
	parts := strings.SplitN(strings.TrimPrefix(p, "/"), "/", 2)
	if len(parts) == 2 {
		return parts[0], parts[1]
	}
	return parts[0], ""
}

// s3Error is the body S3 sends with an error status.
type s3Error struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	Resource  string   `xml:"Resource,omitempty"`
	RequestID string   `xml:"RequestId"`
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	id := "deed-" + strconv.FormatUint(s.reqID.Add(1), 16)
	h := w.Header()
	h.Set("x-amz-request-id", id)
	h.Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	body, err := xml.Marshal(s3Error{Code: code, Message: msg, Resource: r.URL.Path, RequestID: id})
	if err != nil {
		s.log.Error("fakes3 encode error body", "err", err)
		return
	}
	_, _ = io.WriteString(w, xml.Header)
	_, _ = w.Write(body)
}

// gofakesLog adapts slog to gofakes3's logger. gofakes3 logs every request
// at INFO; that is debug detail for deed.
type gofakesLog struct{ l *slog.Logger }

func (g gofakesLog) Print(level gofakes3.LogLevel, v ...any) {
	msg := strings.TrimSuffix(fmt.Sprintln(v...), "\n")
	switch level {
	case gofakes3.LogErr:
		g.l.Error("gofakes3: " + msg)
	case gofakes3.LogWarn:
		g.l.Warn("gofakes3: " + msg)
	default:
		g.l.Debug("gofakes3: " + msg)
	}
}
