package azblob_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/azblob"
)

// canned is a Blob service stand-in: it answers the first fail requests
// with status and Azure error code, then succeeds, and records every
// request. A HEAD gets headStatus when it is set.
type canned struct {
	mu         sync.Mutex
	status     int
	code       string
	fail       int
	headStatus int
	requests   []string
}

func (c *canned) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.requests = append(c.requests, r.Method+" "+r.Header.Get("If-Match")+r.Header.Get("If-None-Match"))
	failing := len(c.requests) <= c.fail
	c.mu.Unlock()
	w.Header().Set("x-ms-request-id", "canned")
	switch {
	case r.Method == http.MethodHead && c.headStatus != 0:
		w.Header().Set("x-ms-error-code", "BlobNotFound")
		w.WriteHeader(c.headStatus)
	case failing:
		w.Header().Set("x-ms-error-code", c.code)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(c.status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="utf-8"?><Error><Code>%s</Code><Message>canned</Message></Error>`, c.code)
	case r.Method == http.MethodPut:
		w.Header().Set("ETag", `"0x8DC0001"`)
		w.WriteHeader(http.StatusCreated)
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusAccepted)
	default:
		w.Header().Set("ETag", `"0x8DC0001"`)
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
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
	b, err := azblob.Open(t.Context(), bucket.Location{Scheme: "az", Bucket: "c"}, azblob.Options{
		Account:    "acct",
		AccountKey: base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")),
		Endpoint:   srv.URL + "/acct",
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The answers of Azure a write can get, and the typed error each must
// become (classify → bucket.Classify and the quirks table).
func TestClassifyAzureAnswers(t *testing.T) {
	cases := []struct {
		status int
		code   string
		cond   bucket.Condition
		want   error
	}{
		{409, "BlobAlreadyExists", bucket.IfAbsent, bucket.ErrPrecondition},
		{412, "ConditionNotMet", bucket.IfMatch(`"0x1"`), bucket.ErrPrecondition},
		{404, "BlobNotFound", bucket.IfMatch(`"0x1"`), bucket.ErrPrecondition},
		// A missing container is configuration, never a failed precondition.
		{404, "ContainerNotFound", bucket.IfMatch(`"0x1"`), bucket.ErrAmbiguous},
		{403, "AuthenticationFailed", bucket.IfAbsent, bucket.ErrAccessDenied},
		{503, "ServerBusy", bucket.IfAbsent, bucket.ErrAmbiguous},
		{500, "InternalError", bucket.IfMatch(`"0x1"`), bucket.ErrAmbiguous},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%d-%s-%s", c.status, c.code, c.cond), func(t *testing.T) {
			b := open(t, &canned{status: c.status, code: c.code, fail: 100})
			_, err := b.Put(t.Context(), "k", []byte("body"), c.cond)
			if !errors.Is(err, c.want) {
				t.Fatalf("put: %v, want %v", err, c.want)
			}
		})
	}
}

// A conditional write goes out exactly once, whatever the answer; reads
// and unconditional writes keep the SDK's retries
// (bucket.QuirkSDKRetriesWrites).
func TestConditionalWritesAreNotRetried(t *testing.T) {
	for _, cond := range []bucket.Condition{bucket.IfAbsent, bucket.IfMatch(`"0x1"`)} {
		c := &canned{status: 503, code: "ServerBusy", fail: 1}
		b := open(t, c)
		if _, err := b.Put(t.Context(), "k", []byte("body"), cond); !errors.Is(err, bucket.ErrAmbiguous) {
			t.Errorf("put %s after a 503: %v, want ambiguous", cond, err)
		}
		if n := c.count(); n != 1 {
			t.Errorf("put %s: %d requests, want 1", cond, n)
		}
	}
	c := &canned{status: 503, code: "ServerBusy", fail: 1}
	b := open(t, c)
	if err := b.Delete(t.Context(), "k", bucket.IfMatch(`"0x1"`)); !errors.Is(err, bucket.ErrAmbiguous) || c.count() != 1 {
		t.Errorf("conditional delete after a 503: %v after %d requests, want ambiguous after 1", err, c.count())
	}

	c = &canned{status: 503, code: "ServerBusy", fail: 1}
	b = open(t, c)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := b.Put(ctx, "k", []byte("body"), bucket.None); err != nil {
		t.Fatalf("unconditional put after one 503: %v, want the retry to succeed", err)
	}
	if n := c.count(); n != 2 {
		t.Errorf("unconditional put: %d requests, want 2", n)
	}
}

// A conditional delete's 412 on a blob that is gone is ErrNotFound
// (bucket.QuirkAzureDeleteMissing); on a blob that is there it stays a
// failed precondition.
func TestDeleteMissing412(t *testing.T) {
	b := open(t, &canned{status: 412, code: "ConditionNotMet", fail: 1, headStatus: 404})
	if err := b.Delete(t.Context(), "k", bucket.IfMatch(`"0x1"`)); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("delete of a missing blob: %v, want not found", err)
	}
	b = open(t, &canned{status: 412, code: "ConditionNotMet", fail: 1})
	if err := b.Delete(t.Context(), "k", bucket.IfMatch(`"0x1"`)); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("delete of a blob with another etag: %v, want precondition failed", err)
	}
}

// Conditions go out as Azure's headers: If-None-Match: * and If-Match with
// the ETag exactly as returned.
func TestConditionHeaders(t *testing.T) {
	c := &canned{}
	b := open(t, c)
	tag, err := b.Put(t.Context(), "k", []byte("body"), bucket.IfAbsent)
	if err != nil || tag != `"0x8DC0001"` {
		t.Fatalf("put = %q, %v", tag, err)
	}
	if _, err := b.Put(t.Context(), "k", []byte("body"), bucket.IfMatch(tag)); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(t.Context(), "k", bucket.IfMatch(tag)); err != nil {
		t.Fatal(err)
	}
	want := []string{`PUT *`, `PUT "0x8DC0001"`, `DELETE "0x8DC0001"`}
	c.mu.Lock()
	defer c.mu.Unlock()
	if fmt.Sprint(c.requests) != fmt.Sprint(want) {
		t.Fatalf("requests %q, want %q", c.requests, want)
	}
}
