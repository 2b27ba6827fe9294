package bucket_test

import (
	"errors"
	"runtime"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
)

// testGetLimit is the size limit of Get on every store: an object of
// exactly max bytes is read, one byte more is ErrTooLarge with the key and
// ETag but no body.
func testGetLimit(t *testing.T, _ dialect, b bucket.Bucket) {
	body := make([]byte, 100)
	etag := mustPut(t, b, "k", string(body), bucket.None)
	o, err := b.Get(t.Context(), "k", 100)
	if err != nil || len(o.Body) != 100 {
		t.Fatalf("get at the limit: %d bytes, %v", len(o.Body), err)
	}
	o, err = b.Get(t.Context(), "k", 99)
	if !errors.Is(err, bucket.ErrTooLarge) {
		t.Fatalf("get over the limit: %v, want ErrTooLarge", err)
	}
	if o.Body != nil || o.Key != "k" || !bucket.SameETag(o.ETag, etag) {
		t.Fatalf("get over the limit returned %+v, want key k, etag %s and no body", o, etag)
	}
	if _, err := b.Get(t.Context(), "missing", 99); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("get missing with a limit: %v, want ErrNotFound", err)
	}
}

// The in-memory fake refuses a 64 MiB object without copying it: the
// limit bounds what one Get allocates.
func TestMemGetLimitAllocatesNoBody(t *testing.T) {
	m := fakes3.NewMem()
	if _, err := m.Put(t.Context(), "big", make([]byte, 64<<20), bucket.None); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := m.Get(t.Context(), "big", 1<<20)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, bucket.ErrTooLarge) {
		t.Fatalf("get: %v, want ErrTooLarge", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("a refused get allocated %d bytes", n)
	}
}
