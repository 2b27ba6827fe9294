package bucket_test

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
	"github.com/deedkit/deed/fakes3/s3test"
)

// A classification column: one operation with one condition.
type classOp struct {
	name string
	op   string
	cond bucket.Condition
}

var classOps = []classOp{
	{"get", "get", bucket.None},
	{"head", "head", bucket.None},
	{"list", "list", bucket.None},
	{"put", "put", bucket.None},
	{"put-if-absent", "put", bucket.IfAbsent},
	{"put-if-match", "put", bucket.IfMatch(`"abc"`)},
	{"delete", "delete", bucket.None},
	{"delete-if-match", "delete", bucket.IfMatch(`"abc"`)},
}

// Shorthands for the expected kinds; ok means success (no error).
var (
	eP  = bucket.ErrPrecondition
	eC  = bucket.ErrConflict
	eN  = bucket.ErrNotFound
	eA  = bucket.ErrAmbiguous
	eU  = bucket.ErrUnavailable
	eX  = bucket.ErrUnsupported
	eD  = bucket.ErrAccessDenied
	eOK error
)

// classRows is the classification table: the response (status 0 = none)
// and the expected kind per column of classOps. The rule it pins down: a
// conditional write that did not get a definite answer is ambiguous, never
// "lost"; reads and unconditional writes are merely unavailable.
var classRows = []struct {
	name   string
	status int // 0: no response
	code   string
	want   [8]error // get head list put put-if-absent put-if-match delete delete-if-match
}{
	{"412", 412, "PreconditionFailed", [8]error{eP, eP, eP, eP, eP, eP, eP, eP}},
	{"409 ConditionalRequestConflict", 409, "ConditionalRequestConflict", [8]error{eC, eC, eC, eC, eC, eC, eC, eC}},
	{"409 OperationAborted", 409, "OperationAborted", [8]error{eU, eU, eU, eU, eC, eC, eU, eC}},
	{"409 BlobAlreadyExists", 409, "BlobAlreadyExists", [8]error{eU, eU, eU, eU, eP, eC, eU, eC}},
	{"409 ObjectParentIsFile", 409, "ObjectParentIsFile", [8]error{eX, eX, eX, eX, eX, eX, eX, eX}},
	{"404 NoSuchKey", 404, "NoSuchKey", [8]error{eN, eN, eN, eN, eN, eP, eN, eN}},
	{"404 NoSuchBucket", 404, "NoSuchBucket", [8]error{eU, eU, eU, eU, eA, eA, eU, eA}},
	{"403", 403, "AccessDenied", [8]error{eD, eD, eD, eD, eD, eD, eD, eD}},
	{"501", 501, "NotImplemented", [8]error{eX, eX, eX, eX, eX, eX, eX, eX}},
	{"500", 500, "InternalError", [8]error{eU, eU, eU, eU, eA, eA, eU, eA}},
	{"503", 503, "SlowDown", [8]error{eU, eU, eU, eU, eA, eA, eU, eA}},
	{"timeout", 0, "", [8]error{eU, eU, eU, eU, eA, eA, eU, eA}},
	{"connection refused", 0, "", [8]error{eU, eU, eU, eU, eA, eA, eU, eA}},
}

var allKinds = []error{eP, eC, eN, eA, eU, eX, eD}

func TestClassify(t *testing.T) {
	for _, row := range classRows {
		for i, col := range classOps {
			var cause error
			switch row.name {
			case "timeout":
				cause = context.DeadlineExceeded
			case "connection refused":
				cause = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
			}
			err := bucket.Classify(col.op, "k", col.cond, row.status, row.code, cause)
			want := row.want[i]
			if err.Kind != want {
				t.Errorf("%s × %s: %v, want %v", row.name, col.name, err.Kind, want)
			}
			for _, k := range allKinds {
				if errors.Is(err, k) != (k == want) {
					t.Errorf("%s × %s: errors.Is(%v) = %v", row.name, col.name, k, !(k == want))
				}
			}
			if cause != nil && !errors.Is(err, cause) {
				t.Errorf("%s × %s: cause not unwrapped", row.name, col.name)
			}
			if err.Status != row.status || err.Code != row.code || err.Key != "k" || err.Op != col.op {
				t.Errorf("%s × %s: %+v does not carry the response", row.name, col.name, err)
			}
		}
	}
}

// Every classification row of the quirks table is reachable: Classify
// gives its Kind for a response matching it.
func TestQuirksTable(t *testing.T) {
	seen := map[string]bool{}
	for _, q := range bucket.Quirks {
		if seen[q.ID] {
			t.Errorf("duplicate quirk %q", q.ID)
		}
		seen[q.ID] = true
		if q.Seen == "" || q.Behaviour == "" || q.Handling == "" {
			t.Errorf("quirk %q is not documented", q.ID)
		}
		if got, ok := bucket.QuirkByID(q.ID); !ok || got.ID != q.ID {
			t.Errorf("QuirkByID(%q) = %v", q.ID, ok)
		}
		if q.Status == 0 {
			continue
		}
		op := q.Op
		if op == "" || op == "write" {
			op = "put"
		}
		cond := bucket.None
		if len(q.Conds) > 0 {
			cond = bucket.Condition{Kind: q.Conds[0], ETag: `"x"`}
		}
		code := q.Code
		if code == "" {
			code = "SomeCode"
		}
		if e := bucket.Classify(op, "k", cond, q.Status, code, nil); e.Kind != q.Kind {
			t.Errorf("quirk %q: Classify gives %v, want %v", q.ID, e.Kind, q.Kind)
		}
	}
	for _, id := range []string{bucket.QuirkETagQuoting, bucket.QuirkIfMatchMissing404,
		bucket.QuirkConditionalConflict, bucket.QuirkConflictAnyCode, bucket.QuirkNotImplemented,
		bucket.QuirkDeleteMissingOK, bucket.QuirkParentIsFile, bucket.QuirkObjectIsDirectory} {
		if !seen[id] {
			t.Errorf("quirk %q has no row", id)
		}
	}
}

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
	b, err := bucket.OpenS3(t.Context(), bucket.Location{Bucket: "b"}, bucket.S3Options{
		Endpoint:    endpoint,
		Credentials: s3test.Credentials(),
		Timeout:     timeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func call(ctx context.Context, b bucket.Bucket, col classOp) error {
	var err error
	switch col.op {
	case "get":
		_, err = b.Get(ctx, "k", 0)
	case "head":
		_, err = b.Head(ctx, "k")
	case "list":
		_, err = b.List(ctx, bucket.ListInput{Prefix: "k"})
	case "put":
		_, err = b.Put(ctx, "k", []byte("v"), col.cond)
	case "delete":
		err = b.Delete(ctx, "k", col.cond)
	}
	return err
}

// TestClassifyThroughSDK runs the classification table through
// aws-sdk-go-v2 against canned responses, so that extracting the status and
// the code from the SDK's errors is tested, not just Classify.
func TestClassifyThroughSDK(t *testing.T) {
	isolateAWSConfig(t)
	dead := deadEndpoint(t)
	for _, row := range classRows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			c := &canned{status: row.status, code: row.code, hang: row.name == "timeout"}
			srv := httptest.NewServer(c)
			t.Cleanup(srv.Close)
			endpoint := srv.URL
			if row.name == "connection refused" {
				endpoint = dead
			}
			b := openCanned(t, endpoint, 200*time.Millisecond)
			for i, col := range classOps {
				// Columns run in parallel: the SDK backs off for up to
				// seconds between retries of a throttled read.
				t.Run(col.name, func(t *testing.T) {
					t.Parallel()
					checkThroughSDK(t, b, row.name, row.status, row.code, col, row.want[i])
				})
			}
		})
	}
}

func checkThroughSDK(t *testing.T, b bucket.Bucket, row string, status int, code string, col classOp, want error) {
	ctx := t.Context()
	if row == "timeout" && !col.cond.Conditional() {
		// Reads and plain writes have no timeout of their own.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
	}
	err := call(ctx, b, col)
	switch {
	case col.name == "delete" && want == eN:
		want = eOK // an unconditional delete of a missing key succeeds
	case col.name == "head" && code == "NoSuchBucket":
		// HEAD responses have no body, so the code is lost and the SDK
		// reports a 404 as NotFound.
		want = eN
	case col.name == "head" && status == 409:
		want = eU // likewise: a bodiless 409 is not known to be a conflict
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
	if col.name != "head" && oe.Code != code {
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
	for _, col := range classOps {
		// 500, not 503 SlowDown: the SDK backs throttles off by seconds.
		c := &canned{status: 500, code: "InternalError"}
		srv := httptest.NewServer(c)
		b := openCanned(t, srv.URL, time.Second)
		err := call(t.Context(), b, col)
		srv.Close()
		n := len(c.requests())
		if col.cond.Conditional() {
			if n != 1 || !errors.Is(err, bucket.ErrAmbiguous) {
				t.Errorf("%s: %d requests, %v; want exactly 1, ambiguous", col.name, n, err)
			}
		} else if n < 2 || !errors.Is(err, bucket.ErrUnavailable) {
			t.Errorf("%s: %d requests, %v; want retries, unavailable", col.name, n, err)
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

// OpenS3 with no Endpoint follows AWS_ENDPOINT_URL_S3 (the SDK resolves it)
// and still uses path-style, and AWS_REGION picks the signing region.
func TestOpenS3Environment(t *testing.T) {
	isolateAWSConfig(t)
	c := &canned{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	t.Setenv("AWS_ENDPOINT_URL_S3", srv.URL)
	t.Setenv("AWS_REGION", "eu-west-3")
	b, err := bucket.OpenS3(t.Context(), bucket.Location{Bucket: "b", Prefix: "pre/fix"},
		bucket.S3Options{Credentials: s3test.Credentials()})
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

func TestOpenS3Errors(t *testing.T) {
	isolateAWSConfig(t)
	ctx := t.Context()
	for _, tc := range []struct {
		loc  bucket.Location
		opts bucket.S3Options
	}{
		{bucket.Location{}, bucket.S3Options{}},
		{bucket.Location{Bucket: "b"}, bucket.S3Options{Endpoint: "localhost:9000"}},
		{bucket.Location{Bucket: "b"}, bucket.S3Options{Endpoint: "ftp://host"}},
		{bucket.Location{Bucket: "b"}, bucket.S3Options{Timeout: -time.Second}},
	} {
		if _, err := bucket.OpenS3(ctx, tc.loc, tc.opts); err == nil {
			t.Errorf("OpenS3(%+v, %+v) succeeded", tc.loc, tc.opts)
		}
	}
	t.Setenv("AWS_ENDPOINT_URL_S3", "not a url")
	if _, err := bucket.OpenS3(ctx, bucket.Location{Bucket: "b"}, bucket.S3Options{Credentials: s3test.Credentials()}); err == nil {
		t.Error("OpenS3 accepted a malformed AWS_ENDPOINT_URL_S3")
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
		if bucket.CodeOf(err) != bucket.CodeBadRequest {
			t.Errorf("put %q: %v, want %s", key, err, bucket.CodeBadRequest)
		}
		if err := b.Delete(t.Context(), key, bucket.IfAbsent); bucket.CodeOf(err) != bucket.CodeBadRequest {
			t.Errorf("delete %q: %v, want %s", key, err, bucket.CodeBadRequest)
		}
	}
	if err := b.Delete(t.Context(), "k", bucket.IfAbsent); bucket.CodeOf(err) != bucket.CodeBadRequest {
		t.Errorf("delete if-absent: %v, want %s", err, bucket.CodeBadRequest)
	}
	if _, err := b.Put(t.Context(), "k", nil, bucket.IfMatch("")); bucket.CodeOf(err) != bucket.CodeBadRequest {
		t.Errorf("put if-match empty etag: %v, want %s", err, bucket.CodeBadRequest)
	}
	if n := len(c.requests()); n != 0 {
		t.Errorf("%d requests sent for invalid input", n)
	}
}
