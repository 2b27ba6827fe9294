package bucket_test

import (
	"errors"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/s3test"
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

// bigBody is a 64 MiB response body that counts what was read of it.
type bigBody struct {
	left int64
	read *atomic.Int64
}

func (b *bigBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), b.left))
	clear(p[:n])
	b.left -= int64(n)
	b.read.Add(int64(n))
	return n, nil
}

func (b *bigBody) Close() error { return nil }

// bigObjects answers every request with a 64 MiB object, announcing its
// length or not (chunked, or a store that lies).
type bigObjects struct {
	announce bool
	read     atomic.Int64
}

func (s *bigObjects) RoundTrip(r *http.Request) (*http.Response, error) {
	const size = 64 << 20
	h := http.Header{"Etag": {`"e"`}, "Content-Type": {"application/octet-stream"}}
	length := int64(-1)
	if s.announce {
		length = size
		h.Set("Content-Length", strconv.Itoa(size))
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, ContentLength: length, Body: &bigBody{left: size, read: &s.read}, Request: r}, nil
}

// The S3 adapter refuses an object over the limit from its Content-Length
// without reading the body, and stops at limit+1 bytes of a body whose
// length was not announced: one Get never holds more than the limit.
func TestS3GetLimitReadsAtMostTheLimit(t *testing.T) {
	isolateAWSConfig(t)
	t.Setenv("AWS_CA_BUNDLE", "") // a CA bundle needs the SDK's own transport
	const max = 1 << 20
	for _, announce := range []bool{true, false} {
		t.Run("content-length="+strconv.FormatBool(announce), func(t *testing.T) {
			rt := &bigObjects{announce: announce}
			b, err := bucket.OpenS3(t.Context(), bucket.Location{Bucket: "b"}, bucket.S3Options{
				Endpoint: "http://127.0.0.1:1", Credentials: s3test.Credentials(), HTTPClient: &http.Client{Transport: rt}})
			if err != nil {
				t.Fatal(err)
			}
			o, err := b.Get(t.Context(), "cells/c/ltx/e1/0000000000000001.ltx", max)
			if !errors.Is(err, bucket.ErrTooLarge) {
				t.Fatalf("get: %v, want ErrTooLarge", err)
			}
			if o.Body != nil || !bucket.SameETag(o.ETag, `"e"`) {
				t.Fatalf("get returned %d bytes, etag %q; want no body and the etag", len(o.Body), o.ETag)
			}
			read := rt.read.Load()
			if announce && read != 0 {
				t.Fatalf("read %d bytes of a body announced over the limit", read)
			}
			if read > max+1 {
				t.Fatalf("read %d bytes of the body, limit %d", read, max)
			}
		})
	}
}
