package fakes3_test

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/s3test"
)

// rawRequest sends one unsigned request (a server started without
// Credentials does not check signatures) and returns the status, headers and body.
func rawRequest(t *testing.T, method, url string, body []byte, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	return do(t, newRequest(t, method, url, body, hdr))
}

// newRequest builds a request with body (nil: none) and headers hdr.
func newRequest(t *testing.T, method, url string, body []byte, hdr map[string]string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		req.Body = http.NoBody
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

// do sends req and returns the status, headers and body.
func do(t *testing.T, req *http.Request) (int, http.Header, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

type xmlError struct {
	Code      string `xml:"Code"`
	Message   string `xml:"Message"`
	RequestID string `xml:"RequestId"`
}

func wantS3Error(t *testing.T, what string, status int, body string, wantStatus int, wantCode string) {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("%s: status %d, want %d (%s)", what, status, wantStatus, body)
	}
	var e xmlError
	if err := xml.Unmarshal([]byte(body), &e); err != nil || e.Code != wantCode || e.Message == "" {
		t.Fatalf("%s: body %q (%v), want an S3 <Error> with code %s", what, body, err, wantCode)
	}
}

func startServer(t *testing.T, opts fakes3.ServerOptions) (*fakes3.Server, string) {
	t.Helper()
	srv, err := fakes3.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv, url
}

// The wire behaviour the middleware adds, checked without the SDK in the
// way: status codes, S3 XML error bodies, and the ETag spellings accepted.
func TestServerConditionalWire(t *testing.T) {
	_, url := startServer(t, fakes3.ServerOptions{Buckets: []string{"b"}})
	obj := url + "/b/cells/c/own.json"

	status, hdr, body := rawRequest(t, "PUT", obj, []byte("v1"), map[string]string{"If-None-Match": "*"})
	if status != 200 {
		t.Fatalf("create: %d %s", status, body)
	}
	etag := hdr.Get("ETag")
	if !strings.HasPrefix(etag, `"`) {
		t.Fatalf("create etag %q, want quoted", etag)
	}

	status, _, body = rawRequest(t, "PUT", obj, []byte("v2"), map[string]string{"If-None-Match": "*"})
	wantS3Error(t, "second create", status, body, 412, "PreconditionFailed")

	status, _, body = rawRequest(t, "PUT", url+"/b/missing", []byte("v"), map[string]string{"If-Match": etag})
	wantS3Error(t, "if-match put on a missing key", status, body, 404, "NoSuchKey")

	status, _, body = rawRequest(t, "PUT", obj, []byte("v2"), map[string]string{"If-Match": `"0000"`})
	wantS3Error(t, "stale if-match put", status, body, 412, "PreconditionFailed")

	// Bare ETag accepted (bucket.QuirkETagQuoting).
	status, hdr, body = rawRequest(t, "PUT", obj, []byte("v2"), map[string]string{"If-Match": strings.Trim(etag, `"`)})
	if status != 200 {
		t.Fatalf("bare if-match put: %d %s", status, body)
	}
	etag2 := hdr.Get("ETag")

	status, _, body = rawRequest(t, "DELETE", obj, nil, map[string]string{"If-Match": etag})
	wantS3Error(t, "stale if-match delete", status, body, 412, "PreconditionFailed")
	status, _, body = rawRequest(t, "DELETE", url+"/b/missing", nil, map[string]string{"If-Match": etag})
	wantS3Error(t, "if-match delete on a missing key", status, body, 404, "NoSuchKey")

	status, hdr, _ = rawRequest(t, "HEAD", obj, nil, nil)
	if status != 200 || hdr.Get("ETag") != etag2 {
		t.Fatalf("head after refused delete: %d %q, want 200 %q", status, hdr.Get("ETag"), etag2)
	}
	status, _, body = rawRequest(t, "DELETE", obj, nil, map[string]string{"If-Match": etag2})
	if status != 204 {
		t.Fatalf("fresh if-match delete: %d %s", status, body)
	}
	if status, _, _ = rawRequest(t, "HEAD", obj, nil, nil); status != 404 {
		t.Fatalf("head after delete: %d", status)
	}

	// Conditions on requests the middleware cannot check are refused, not
	// ignored.
	status, _, body = rawRequest(t, "PUT", url+"/b/copy", nil,
		map[string]string{"If-None-Match": "*", "X-Amz-Copy-Source": "/b/other"})
	wantS3Error(t, "conditional copy", status, body, 501, "NotImplemented")
	status, _, body = rawRequest(t, "DELETE", url+"/b/k", nil, map[string]string{"If-None-Match": "*"})
	wantS3Error(t, "if-none-match delete", status, body, 501, "NotImplemented")

	// A missing bucket is gofakes3's answer, not a missing key.
	status, _, body = rawRequest(t, "DELETE", url+"/nobucket/k", nil, map[string]string{"If-Match": etag})
	wantS3Error(t, "if-match delete in a missing bucket", status, body, 404, "NoSuchBucket")
}

// PUT, GET, HEAD and LIST report byte-identical ETags for one object.
func TestServerETagsAgree(t *testing.T) {
	tg := s3test.HTTPFake(t)
	ctx := t.Context()
	for _, body := range []string{"", "x", strings.Repeat("deed", 50_000)} {
		key := "obj/" + string(rune('a'+len(body)%26))
		put, err := tg.Bucket.Put(ctx, key, []byte(body), bucket.None)
		if err != nil {
			t.Fatal(err)
		}
		o, err := tg.Bucket.Get(ctx, key, 0)
		if err != nil {
			t.Fatal(err)
		}
		h, err := tg.Bucket.Head(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		page, err := tg.Bucket.List(ctx, bucket.ListInput{Prefix: key})
		if err != nil || len(page.Objects) != 1 {
			t.Fatalf("list %s: %+v, %v", key, page, err)
		}
		if o.ETag != put || h.ETag != put || page.Objects[0].ETag != put {
			t.Fatalf("%s: put %s get %s head %s list %s", key, put, o.ETag, h.ETag, page.Objects[0].ETag)
		}
	}
}

func TestServerIgnoreConditions(t *testing.T) {
	tg := s3test.HTTPFakeWith(t, fakes3.ServerOptions{IgnoreConditions: true})
	ctx := t.Context()
	b := tg.Bucket
	e1, err := b.Put(ctx, "k", []byte("1"), bucket.IfAbsent)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "k", []byte("2"), bucket.IfAbsent); err != nil {
		t.Fatalf("broken store refused a second create: %v", err)
	}
	if _, err := b.Put(ctx, "k", []byte("3"), bucket.IfMatch(e1)); err != nil {
		t.Fatalf("broken store refused a stale if-match: %v", err)
	}
	if _, err := b.Put(ctx, "new", []byte("3"), bucket.IfMatch(e1)); err != nil {
		t.Fatalf("broken store refused an if-match on a missing key: %v", err)
	}
	if err := b.Delete(ctx, "k", bucket.IfMatch(e1)); err != nil {
		t.Fatalf("broken store refused a stale delete: %v", err)
	}
	if _, err := b.Head(ctx, "k"); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("stale delete did not delete: %v", err)
	}
}

// A persisted server keeps its objects across a restart, and creating its
// buckets again is harmless.
func TestServerPersists(t *testing.T) {
	opts := fakes3.ServerOptions{Dir: t.TempDir(), Buckets: []string{"deed-test"}}
	open := func(url string) bucket.Bucket {
		b, err := s3.Open(t.Context(), bucket.Location{Bucket: "deed-test"},
			s3.Options{Endpoint: url, Credentials: s3test.Credentials()})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	s1, url1 := startServer(t, opts)
	etag, err := open(url1).Put(t.Context(), "k", []byte("kept"), bucket.IfAbsent)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	_, url2 := startServer(t, opts)
	b2 := open(url2)
	o, err := b2.Get(t.Context(), "k", 0)
	if err != nil || string(o.Body) != "kept" || o.ETag != etag {
		t.Fatalf("after restart: %q %s, %v; want kept %s", o.Body, o.ETag, err, etag)
	}
	if _, err := b2.Put(t.Context(), "k", []byte("again"), bucket.IfAbsent); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("create over a persisted key: %v", err)
	}
}

func TestServerHandlerAndLifecycle(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := fakes3.NewServer(fakes3.ServerOptions{Buckets: []string{"b", "b"}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if srv.URL() != "" {
		t.Fatalf("URL before Start = %q", srv.URL())
	}
	// Handler can be mounted anywhere, without Start.
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	status, _, body := rawRequest(t, "PUT", hs.URL+"/b/k", []byte("v"), map[string]string{"If-None-Match": "*"})
	if status != 200 {
		t.Fatalf("put through Handler: %d %s", status, body)
	}

	url, err := srv.Start("127.0.0.1:0")
	if err != nil || url != srv.URL() || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("Start = %q, %v; URL %q", url, err, srv.URL())
	}
	if _, err := srv.Start("127.0.0.1:0"); err == nil {
		t.Fatal("second Start succeeded")
	}
	// Both front doors serve the same store.
	if status, _, _ := rawRequest(t, "HEAD", url+"/b/k", nil, nil); status != 200 {
		t.Fatalf("head through Start: %d", status)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := srv.Start("127.0.0.1:0"); err == nil {
		t.Fatal("Start after Close succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "fakes3 listening") || !strings.Contains(logs.String(), "gofakes3:") {
		t.Errorf("logs missing the listen line or gofakes3's messages:\n%s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Every conditional mutation is atomic against every other mutation: many
// clients doing read-modify-write with If-Match never lose an update.
func TestServerCompareAndSwapCounter(t *testing.T) {
	tg := s3test.HTTPFake(t)
	ctx := t.Context()
	b := tg.Bucket
	if _, err := b.Put(ctx, "n", []byte("0"), bucket.IfAbsent); err != nil {
		t.Fatal(err)
	}
	const workers, incs = 8, 10
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for done := 0; done < incs; {
				o, err := b.Get(ctx, "n", 0)
				if err != nil {
					t.Error(err)
					return
				}
				n, err := strconv.Atoi(string(o.Body))
				if err != nil {
					t.Error(err)
					return
				}
				next := []byte(strconv.Itoa(n + 1))
				if _, err := b.Put(ctx, "n", next, bucket.IfMatch(o.ETag)); err == nil {
					done++
				} else if !errors.Is(err, bucket.ErrPrecondition) {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	o, err := b.Get(ctx, "n", 0)
	if err != nil || string(o.Body) != strconv.Itoa(workers*incs) {
		t.Fatalf("counter = %q, %v; want %d", o.Body, err, workers*incs)
	}
}
