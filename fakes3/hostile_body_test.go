package fakes3_test

import (
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/deedkit/deed/fakes3"
)

// countingBody is a body of n zero bytes that counts what was read of it.
type countingBody struct {
	left, read int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), b.left)
	clear(p[:n])
	b.left -= n
	b.read += n
	return int(n), nil
}

func (b *countingBody) Close() error { return nil }

// A PUT with the store's real access key id (it is no secret: every
// Authorization header carries it), a signature made without the secret
// key and a 64 MiB body is refused 403 SignatureDoesNotMatch without one
// byte of the body read (the store used to read it all, and grow by 158
// MiB, before answering XAmzContentSHA256Mismatch); a body over MaxBody is
// refused 400 EntityTooLarge having read at most MaxBody, even when
// signed. Every refusal closes the connection.
func TestServerChecksSignatureBeforeBody(t *testing.T) {
	srv, err := fakes3.NewServer(fakes3.ServerOptions{Buckets: []string{"deed"}, Credentials: &sigCreds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	bogus := fakes3.Credentials{AccessKeyID: sigCreds.AccessKeyID, SecretAccessKey: "not-the-key"}
	const big = 64 << 20
	for _, tc := range []struct {
		name      string
		creds     fakes3.Credentials
		size      int64
		length    int64 // Content-Length; -1: chunked
		hash      string
		status    int
		code      string
		maxRead   int64
		closeConn bool
	}{
		{"bogus signature, 64 MiB", bogus, big, big, payloadHash([]byte("x")), 403, "SignatureDoesNotMatch", 0, true},
		{"bogus signature, unsigned 64 MiB", bogus, big, big, "UNSIGNED-PAYLOAD", 403, "SignatureDoesNotMatch", 0, true},
		{"bogus signature, 64 MiB chunked", bogus, big, -1, "UNSIGNED-PAYLOAD", 403, "SignatureDoesNotMatch", 0, true},
		{"signed, 64 MiB declared", sigCreds, big, big, "UNSIGNED-PAYLOAD", 400, "EntityTooLarge", 0, true},
		{"signed, 64 MiB chunked", sigCreds, big, -1, "UNSIGNED-PAYLOAD", 400, "EntityTooLarge", fakes3.MaxBody + 1<<20, true},
		{"signed hash, 64 MiB chunked", sigCreds, big, -1, payloadHash([]byte("x")), 400, "EntityTooLarge", fakes3.MaxBody + 1<<20, true},
	} {
		body := &countingBody{left: tc.size}
		req := signed(t, "PUT", "http://127.0.0.1/deed/x", nil, tc.creds, time.Now(), tc.hash, nil, nil)
		req.Body, req.ContentLength = body, tc.length
		if tc.length >= 0 {
			req.Header.Set("Content-Length", strconv.FormatInt(tc.length, 10))
		}
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		code := s3Code(t, rec.Body.String())
		if rec.Code != tc.status || code != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, rec.Code, code, tc.status, tc.code)
		}
		if body.read > tc.maxRead {
			t.Errorf("%s: read %d bytes of the body, want at most %d", tc.name, body.read, tc.maxRead)
		}
		if got := rec.Header().Get("Connection") == "close"; got != tc.closeConn {
			t.Errorf("%s: Connection: close %v, want %v", tc.name, got, tc.closeConn)
		}
	}
	// A small, correctly signed PUT still lands.
	req := signed(t, "PUT", "http://127.0.0.1/deed/x", []byte("ok"), sigCreds, time.Now(), "", nil, nil)
	req.Header.Set("Content-Length", "2")
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("signed PUT: %d %s", rec.Code, rec.Body)
	}
}

// s3Code is the code of an S3 XML error body, "" if it is none.
func s3Code(t *testing.T, body string) string {
	t.Helper()
	var e xmlError
	if err := xml.Unmarshal([]byte(body), &e); err != nil {
		return ""
	}
	return e.Code
}
