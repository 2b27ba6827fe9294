package s3_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/bucket/storetest"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3/s3test"
)

// canned is an S3 endpoint that answers every request with one scripted
// response, and records what it was sent.
type canned struct {
	mu     sync.Mutex
	status int    // 0 or 2xx: success
	code   string // S3 error code for the XML body
	hang   bool   // never answer; wait for the client to give up
	reqs   []*http.Request
	bodies []string
}

func (c *canned) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.reqs = append(c.reqs, r.Clone(context.Background()))
	c.bodies = append(c.bodies, string(body))
	status, code, hang := c.status, c.code, c.hang
	c.mu.Unlock()
	if hang {
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
		return
	}
	if status >= 300 {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		if r.Method != http.MethodHead {
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+
				`<Error><Code>%s</Code><Message>canned</Message><RequestId>canned-1</RequestId></Error>`, code)
		}
		return
	}
	w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
	switch {
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2":
		w.Header().Set("Content-Type", "application/xml")
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>`)
	case r.Method == http.MethodGet:
		fmt.Fprint(w, "body")
	case r.Method == http.MethodHead:
		w.Header().Set("Content-Length", "4")
	}
}

func (c *canned) requests() []*http.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*http.Request(nil), c.reqs...)
}

func openCanned(t *testing.T, endpoint string, timeout time.Duration) bucket.Bucket {
	t.Helper()
	b, err := s3.Open(t.Context(), bucket.Location{Bucket: "b"}, s3.Options{
		Endpoint:    endpoint,
		Credentials: s3test.Credentials(),
		Timeout:     timeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func call(ctx context.Context, b bucket.Bucket, col storetest.ClassOp) error {
	var err error
	switch col.Op {
	case "get":
		_, err = b.Get(ctx, "k", 0)
	case "head":
		_, err = b.Head(ctx, "k")
	case "list":
		_, err = b.List(ctx, bucket.ListInput{Prefix: "k"})
	case "put":
		_, err = b.Put(ctx, "k", []byte("v"), col.Cond)
	case "delete":
		err = b.Delete(ctx, "k", col.Cond)
	}
	return err
}

// TestClassifyThroughSDK runs the classification table through
// aws-sdk-go-v2 against canned responses, so that extracting the status and
// the code from the SDK's errors is tested, not just Classify.
func TestClassifyThroughSDK(t *testing.T) {
	isolateAWSConfig(t)
	dead := deadEndpoint(t)
	for _, row := range storetest.ClassRows {
		t.Run(row.Name, func(t *testing.T) {
			t.Parallel()
			c := &canned{status: row.Status, code: row.Code, hang: row.Name == "timeout"}
			srv := httptest.NewServer(c)
			t.Cleanup(srv.Close)
			endpoint := srv.URL
			if row.Name == "connection refused" {
				endpoint = dead
			}
			b := openCanned(t, endpoint, 200*time.Millisecond)
			for i, col := range storetest.ClassOps {
				// Columns run in parallel: the SDK backs off for up to
				// seconds between retries of a throttled read.
				t.Run(col.Name, func(t *testing.T) {
					t.Parallel()
					checkThroughSDK(t, b, row.Name, row.Status, row.Code, col, row.Want[i])
				})
			}
		})
	}
}

func checkThroughSDK(t *testing.T, b bucket.Bucket, row string, status int, code string, col storetest.ClassOp, want error) {
	ctx := t.Context()
	if row == "timeout" && !col.Cond.Conditional() {
		// Reads and plain writes have no timeout of their own.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
	}
	err := call(ctx, b, col)
	switch {
	case col.Name == "delete" && want == bucket.ErrNotFound:
		want = nil // an unconditional delete of a missing key succeeds
	case col.Name == "head" && code == "NoSuchBucket":
		// HEAD responses have no body, so the code is lost and the SDK
		// reports a 404 as NotFound.
		want = bucket.ErrNotFound
	case col.Name == "head" && status == 409:
		want = bucket.ErrUnavailable // likewise: a bodiless 409 is not known to be a conflict
	}
	if want == nil {
		if err != nil {
			t.Errorf("%v, want success", err)
		}
		return
	}
	var oe *bucket.OpError
	if !errors.As(err, &oe) || oe.Kind != want {
		t.Fatalf("%v, want %v", err, want)
	}
	if oe.Status != status {
		t.Errorf("status %d, want %d", oe.Status, status)
	}
	if col.Name != "head" && oe.Code != code {
		t.Errorf("code %q, want %q", oe.Code, code)
	}
	if row == "timeout" && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v does not unwrap to the deadline", err)
	}
}

// deadEndpoint is a URL on which nothing listens.
func deadEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// isolateAWSConfig keeps the host's AWS configuration out of a test.
func isolateAWSConfig(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_CONFIG_FILE":             dir + "/config",
		"AWS_SHARED_CREDENTIALS_FILE": dir + "/credentials",
		"AWS_PROFILE":                 "",
		"AWS_REGION":                  "",
		"AWS_DEFAULT_REGION":          "",
		"AWS_ENDPOINT_URL":            "",
		"AWS_ENDPOINT_URL_S3":         "",
		"AWS_MAX_ATTEMPTS":            "",
		"AWS_RETRY_MODE":              "",
	} {
		t.Setenv(k, v)
	}
}

// Conditional writes go out exactly once (a retried conditional PUT can
// collide with its own first attempt and report a false 412); reads and
// plain writes are retried by the SDK.
func TestRetryPolicy(t *testing.T) {
	isolateAWSConfig(t)
	for _, col := range storetest.ClassOps {
		// 500, not 503 SlowDown: the SDK backs throttles off by seconds.
		c := &canned{status: 500, code: "InternalError"}
		srv := httptest.NewServer(c)
		b := openCanned(t, srv.URL, time.Second)
		err := call(t.Context(), b, col)
		srv.Close()
		n := len(c.requests())
		if col.Cond.Conditional() {
			if n != 1 || !errors.Is(err, bucket.ErrAmbiguous) {
				t.Errorf("%s: %d requests, %v; want exactly 1, ambiguous", col.Name, n, err)
			}
		} else if n < 2 || !errors.Is(err, bucket.ErrUnavailable) {
			t.Errorf("%s: %d requests, %v; want retries, unavailable", col.Name, n, err)
		}
	}
}

// The per-request timeout bounds a conditional write even when the caller's
// context has none, and the outcome is ambiguous.
func TestConditionalWriteTimeout(t *testing.T) {
	isolateAWSConfig(t)
	srv := httptest.NewServer(&canned{hang: true})
	defer srv.Close()
	b := openCanned(t, srv.URL, 150*time.Millisecond)
	start := time.Now()
	_, err := b.Put(t.Context(), "k", []byte("v"), bucket.IfAbsent)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("conditional put took %v with a 150ms timeout", took)
	}
	if !errors.Is(err, bucket.ErrAmbiguous) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung conditional put: %v, want ambiguous deadline", err)
	}
}

// What goes on the wire: the conditions, the ETag byte for byte, path-style
// addressing, the region, and no aws-chunked checksum trailers.
func TestS3Wire(t *testing.T) {
	isolateAWSConfig(t)
	c := &canned{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	b := openCanned(t, srv.URL, time.Second)
	ctx := t.Context()

	steps := []struct {
		do     func() error
		method string
		header string
		value  string
	}{
		{func() error { _, err := b.Put(ctx, "cells/a/own.json", []byte("v"), bucket.IfAbsent); return err },
			"PUT", "If-None-Match", "*"},
		{func() error { _, err := b.Put(ctx, "cells/a/own.json", []byte("v"), bucket.IfMatch(`"q"`)); return err },
			"PUT", "If-Match", `"q"`},
		{func() error {
			_, err := b.Put(ctx, "cells/a/own.json", []byte("v"), bucket.IfMatch("bare"))
			return err
		},
			"PUT", "If-Match", "bare"},
		{func() error { return b.Delete(ctx, "cells/a/own.json", bucket.IfMatch(`"d"`)) },
			"DELETE", "If-Match", `"d"`},
		{func() error { _, err := b.Put(ctx, "cells/a/own.json", []byte("v"), bucket.None); return err },
			"PUT", "If-Match", ""},
	}
	for i, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		r := c.requests()[i]
		if r.Method != s.method || r.URL.Path != "/b/cells/a/own.json" {
			t.Errorf("step %d: %s %s, want %s path-style /b/cells/a/own.json", i, r.Method, r.URL.Path, s.method)
		}
		if got := r.Header.Get(s.header); got != s.value {
			t.Errorf("step %d: %s = %q, want %q", i, s.header, got, s.value)
		}
		if r.Method == "PUT" {
			if r.Header.Get("If-None-Match") != "" && s.header != "If-None-Match" {
				t.Errorf("step %d: stray If-None-Match", i)
			}
			if enc := r.Header.Get("Content-Encoding"); strings.Contains(enc, "aws-chunked") {
				t.Errorf("step %d: aws-chunked body", i)
			}
			for k := range r.Header {
				if strings.HasPrefix(strings.ToLower(k), "x-amz-checksum-") || strings.EqualFold(k, "x-amz-trailer") {
					t.Errorf("step %d: checksum header %s sent", i, k)
				}
			}
			if c.bodies[i] != "v" {
				t.Errorf("step %d: body %q", i, c.bodies[i])
			}
		}
		if auth := r.Header.Get("Authorization"); !strings.Contains(auth, "/us-east-1/s3/") ||
			!strings.Contains(auth, "Credential="+s3test.AccessKey+"/") {
			t.Errorf("step %d: Authorization %q, want us-east-1 and the static key", i, auth)
		}
	}
}

// Open with no Endpoint follows AWS_ENDPOINT_URL_S3 (the SDK resolves it)
// and still uses path-style, and AWS_REGION picks the signing region.
func TestOpenEnvironment(t *testing.T) {
	isolateAWSConfig(t)
	c := &canned{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	t.Setenv("AWS_ENDPOINT_URL_S3", srv.URL)
	t.Setenv("AWS_REGION", "eu-west-3")
	b, err := s3.Open(t.Context(), bucket.Location{Bucket: "b", Prefix: "pre/fix"},
		s3.Options{Credentials: s3test.Credentials()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(t.Context(), "k", 0); err != nil {
		t.Fatal(err)
	}
	reqs := c.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests reached AWS_ENDPOINT_URL_S3, want 1", len(reqs))
	}
	if reqs[0].URL.Path != "/b/pre/fix/k" {
		t.Errorf("path %q, want path-style /b/pre/fix/k", reqs[0].URL.Path)
	}
	if auth := reqs[0].Header.Get("Authorization"); !strings.Contains(auth, "/eu-west-3/s3/") {
		t.Errorf("Authorization %q, want region eu-west-3", auth)
	}
}

func TestOpenErrors(t *testing.T) {
	isolateAWSConfig(t)
	ctx := t.Context()
	for _, tc := range []struct {
		loc  bucket.Location
		opts s3.Options
	}{
		{bucket.Location{}, s3.Options{}},
		{bucket.Location{Bucket: "b"}, s3.Options{Endpoint: "localhost:9000"}},
		{bucket.Location{Bucket: "b"}, s3.Options{Endpoint: "ftp://host"}},
		{bucket.Location{Bucket: "b"}, s3.Options{Timeout: -time.Second}},
	} {
		if _, err := s3.Open(ctx, tc.loc, tc.opts); err == nil {
			t.Errorf("Open(%+v, %+v) succeeded", tc.loc, tc.opts)
		}
	}
	t.Setenv("AWS_ENDPOINT_URL_S3", "not a url")
	if _, err := s3.Open(ctx, bucket.Location{Bucket: "b"}, s3.Options{Credentials: s3test.Credentials()}); err == nil {
		t.Error("Open accepted a malformed AWS_ENDPOINT_URL_S3")
	}
}

// Keys that stores would normalise are refused before any request.
func TestS3RejectsBadKeys(t *testing.T) {
	isolateAWSConfig(t)
	c := &canned{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	b := openCanned(t, srv.URL, time.Second)
	for _, key := range []string{"", "a/../b", "/abs", "a//b", "a\x00b"} {
		_, err := b.Put(t.Context(), key, nil, bucket.IfAbsent)
		if errcode.CodeOf(err) != errcode.CodeBadRequest {
			t.Errorf("put %q: %v, want %s", key, err, errcode.CodeBadRequest)
		}
		if err := b.Delete(t.Context(), key, bucket.IfAbsent); errcode.CodeOf(err) != errcode.CodeBadRequest {
			t.Errorf("delete %q: %v, want %s", key, err, errcode.CodeBadRequest)
		}
	}
	if err := b.Delete(t.Context(), "k", bucket.IfAbsent); errcode.CodeOf(err) != errcode.CodeBadRequest {
		t.Errorf("delete if-absent: %v, want %s", err, errcode.CodeBadRequest)
	}
	if _, err := b.Put(t.Context(), "k", nil, bucket.IfMatch("")); errcode.CodeOf(err) != errcode.CodeBadRequest {
		t.Errorf("put if-match empty etag: %v, want %s", err, errcode.CodeBadRequest)
	}
	if n := len(c.requests()); n != 0 {
		t.Errorf("%d requests sent for invalid input", n)
	}
}
