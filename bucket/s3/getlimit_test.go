package s3_test

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/fakes3/s3test"
)

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
			b, err := s3.Open(t.Context(), bucket.Location{Bucket: "b"}, s3.Options{
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
