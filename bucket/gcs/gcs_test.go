package gcs_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/gcs"
	"github.com/deedkit/deed/errcode"
)

// canned is a GCS JSON API stand-in: it answers the first fail requests
// with status (and a GCS error body naming reason), then succeeds, and
// records every request.
type canned struct {
	mu       sync.Mutex
	status   int
	reason   string
	fail     int
	requests []*http.Request
}

func (c *canned) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.requests = append(c.requests, r)
	failing := len(c.requests) <= c.fail
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if failing {
		w.WriteHeader(c.status)
		fmt.Fprintf(w, `{"error":{"code":%d,"message":"canned","errors":[{"reason":%q,"message":"canned"}]}}`, c.status, c.reason)
		return
	}
	switch {
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Query().Get("alt") == "media":
		w.Header().Set("X-Goog-Generation", "42")
		w.Header().Set("Content-Length", "4")
		_, _ = w.Write([]byte("body"))
	default:
		sum := crc32.Checksum([]byte("body"), crc32.MakeTable(crc32.Castagnoli))
		crc := base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, sum))
		fmt.Fprintf(w, `{"kind":"storage#object","name":"k","bucket":"b","generation":"42","metageneration":"1","size":"4","crc32c":%q}`, crc)
	}
}

func (c *canned) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.requests)
}

func open(t *testing.T, c *canned) bucket.Bucket {
	t.Helper()
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	b, err := gcs.Open(t.Context(), bucket.Location{Scheme: "gs", Bucket: "b"}, gcs.Options{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The answers of GCS a conditional write can get, and the typed error each
// must become (classify → bucket.Classify).
func TestClassifyGCSAnswers(t *testing.T) {
	cases := []struct {
		status int
		reason string
		cond   bucket.Condition
		want   error
	}{
		{412, "conditionNotMet", bucket.IfAbsent, bucket.ErrPrecondition},
		{412, "conditionNotMet", bucket.IfMatch("7"), bucket.ErrPrecondition},
		{403, "forbidden", bucket.IfAbsent, bucket.ErrAccessDenied},
		{401, "required", bucket.IfMatch("7"), bucket.ErrAccessDenied},
		{503, "backendError", bucket.IfAbsent, bucket.ErrAmbiguous},
		{500, "internalError", bucket.IfMatch("7"), bucket.ErrAmbiguous},
		{429, "rateLimitExceeded", bucket.IfMatch("7"), bucket.ErrAmbiguous},
		// A 404 on an upload is the bucket: never a failed precondition.
		{404, "notFound", bucket.IfMatch("7"), bucket.ErrAmbiguous},
		{503, "backendError", bucket.None, bucket.ErrUnavailable},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%d-%s-%s", c.status, c.reason, c.cond), func(t *testing.T) {
			// fail: 100 so that even the retried unconditional put fails.
			b := open(t, &canned{status: c.status, reason: c.reason, fail: 100})
			ctx := t.Context()
			if !c.cond.Conditional() {
				var cancel func()
				ctx, cancel = contextWithShortTimeout(t)
				defer cancel()
			}
			_, err := b.Put(ctx, "k", []byte("body"), c.cond)
			if !errors.Is(err, c.want) {
				t.Fatalf("put: %v, want %v", err, c.want)
			}
		})
	}
}

// A conditional write goes out exactly once, whatever the answer; an
// read is retried by the SDK (bucket.QuirkSDKRetriesWrites).
func TestConditionalWritesAreNotRetried(t *testing.T) {
	for _, cond := range []bucket.Condition{bucket.IfAbsent, bucket.IfMatch("7")} {
		c := &canned{status: 503, reason: "backendError", fail: 1}
		b := open(t, c)
		if _, err := b.Put(t.Context(), "k", []byte("body"), cond); !errors.Is(err, bucket.ErrAmbiguous) {
			t.Errorf("put %s after a 503: %v, want ambiguous", cond, err)
		}
		if n := c.count(); n != 1 {
			t.Errorf("put %s: %d requests, want 1", cond, n)
		}
	}
	c := &canned{status: 503, reason: "backendError", fail: 1}
	b := open(t, c)
	if err := b.Delete(t.Context(), "k", bucket.IfMatch("7")); !errors.Is(err, bucket.ErrAmbiguous) || c.count() != 1 {
		t.Errorf("conditional delete after a 503: %v after %d requests, want ambiguous after 1", err, c.count())
	}

	// Reads keep the SDK's retries. (An unconditional upload is not
	// idempotent to the SDK, so it is not retried either.)
	c = &canned{status: 503, reason: "backendError", fail: 1}
	b = open(t, c)
	if _, err := b.Head(t.Context(), "k"); err != nil {
		t.Fatalf("head after one 503: %v, want the retry to succeed", err)
	}
	if n := c.count(); n != 2 {
		t.Errorf("head: %d requests, want 2", n)
	}
}

// The generation is the ETag: Put returns it, If-Match sends it as
// ifGenerationMatch, create-only is ifGenerationMatch=0, and a value that
// is no generation fails the precondition without a request.
func TestGenerationIsTheETag(t *testing.T) {
	c := &canned{}
	b := open(t, c)
	tag, err := b.Put(t.Context(), "k", []byte("body"), bucket.IfAbsent)
	if err != nil || tag != "42" {
		t.Fatalf("put = %q, %v; want generation 42", tag, err)
	}
	if _, err := b.Put(t.Context(), "k", []byte("body"), bucket.IfMatch(`"42"`)); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(t.Context(), "k", bucket.IfMatch("42")); err != nil {
		t.Fatal(err)
	}
	o, err := b.Get(t.Context(), "k", 0)
	if err != nil || o.ETag != "42" || string(o.Body) != "body" {
		t.Fatalf("get = %+v, %v", o, err)
	}
	if _, err := b.Get(t.Context(), "k", 3); !errors.Is(err, bucket.ErrTooLarge) {
		t.Fatalf("get over the limit: %v, want too large", err)
	}
	var got []string
	for _, r := range c.requests[:3] {
		got = append(got, r.Method+" ifGenerationMatch="+r.URL.Query().Get("ifGenerationMatch"))
	}
	want := []string{"POST ifGenerationMatch=0", "POST ifGenerationMatch=42", "DELETE ifGenerationMatch=42"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("requests %q, want %q", got, want)
	}

	n := c.count()
	_, err = b.Put(t.Context(), "k", []byte("x"), bucket.IfMatch(`"0x8DC1"`))
	if !errors.Is(err, bucket.ErrPrecondition) || c.count() != n {
		t.Fatalf("put with a non-generation etag: %v after %d requests, want precondition failed and none", err, c.count()-n)
	}
	_, err = b.Put(t.Context(), "k", []byte("x"), bucket.IfMatch(""))
	if errcode.CodeOf(err) != errcode.CodeBadRequest || c.count() != n {
		t.Fatalf("put with an empty etag: %v after %d requests, want DEED-E040 and none", err, c.count()-n)
	}
}

// contextWithShortTimeout bounds an unconditional write the SDK would
// retry for as long as the context allows.
func contextWithShortTimeout(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), 3*time.Second)
}
