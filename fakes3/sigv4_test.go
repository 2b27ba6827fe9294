package fakes3_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

var sigCreds = fakes3.Credentials{AccessKeyID: "AKIDSIGV4TEST", SecretAccessKey: "sigv4-secret"}

func awsCreds(c fakes3.Credentials) aws.Credentials {
	return aws.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey}
}

func payloadHash(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// signed builds a request signed by the AWS SDK's own v4 signer, so the
// server is checked against the reference implementation, not against a
// signer written alongside it. mutate runs after signing (to tamper).
func signed(t *testing.T, method, url string, body []byte, c fakes3.Credentials, at time.Time, hash string, hdr map[string]string, mutate func(*http.Request)) *http.Request {
	t.Helper()
	req := newRequest(t, method, url, body, hdr)
	req.ContentLength = int64(len(body))
	if hash == "" {
		hash = payloadHash(body)
	}
	req.Header.Set("X-Amz-Content-Sha256", hash)
	if err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).
		SignHTTP(t.Context(), awsCreds(c), req, hash, "s3", "us-east-1", at); err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(req)
	}
	return req
}

func send(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	st, _, body := do(t, req)
	return st, body
}

// With credentials, the server serves only requests signed with them: the
// unsigned GET, PUT and DELETE that used to list, rewrite an ownership
// record and fence a node are refused with S3 errors and change nothing.
func TestServerSigV4RefusesUnsigned(t *testing.T) {
	_, url := startServer(t, fakes3.ServerOptions{Buckets: []string{"b"}, Credentials: &sigCreds})
	now := time.Now()
	own := url + "/b/cells/c/own.json"
	if st, body := send(t, signed(t, "PUT", own, []byte(`{"node":"a"}`), sigCreds, now, "", nil, nil)); st != 200 {
		t.Fatalf("signed PUT: %d %s", st, body)
	}

	st, _, body := rawRequest(t, "GET", url+"/b?list-type=2", nil, nil)
	wantS3Error(t, "unsigned list", st, body, 403, "AccessDenied")
	if strings.Contains(body, "own.json") {
		t.Fatalf("unsigned list leaked keys: %s", body)
	}
	st, _, body = rawRequest(t, "PUT", own, []byte(`{"node":"evil"}`), nil)
	wantS3Error(t, "unsigned put", st, body, 403, "AccessDenied")
	st, _, body = rawRequest(t, "DELETE", own, nil, nil)
	wantS3Error(t, "unsigned delete", st, body, 403, "AccessDenied")
	st, _, body = rawRequest(t, "GET", own, nil, map[string]string{"Authorization": "Basic Zm9vOmJhcg=="})
	wantS3Error(t, "basic auth", st, body, 403, "AccessDenied")

	st, body = send(t, signed(t, "GET", own, nil, sigCreds, now, "", nil, nil))
	if st != 200 || body != `{"node":"a"}` {
		t.Fatalf("own.json after refused writes: %d %q", st, body)
	}
}

func TestServerSigV4Checks(t *testing.T) {
	_, url := startServer(t, fakes3.ServerOptions{Buckets: []string{"b"}, Credentials: &sigCreds})
	now := time.Now()
	key := url + "/b/k"
	body := []byte("payload")
	ok := func(what string, req *http.Request) {
		t.Helper()
		if st, b := send(t, req); st != 200 && st != 204 {
			t.Fatalf("%s: %d %s", what, st, b)
		}
	}
	refused := func(what string, req *http.Request, status int, code string) {
		t.Helper()
		st, b := send(t, req)
		wantS3Error(t, what, st, b, status, code)
	}

	ok("signed put", signed(t, "PUT", key, body, sigCreds, now, "", nil, nil))
	ok("unsigned payload", signed(t, "PUT", key, body, sigCreds, now, "UNSIGNED-PAYLOAD", nil, nil))
	ok("signed conditional put", signed(t, "PUT", url+"/b/k2", body, sigCreds, now, "", map[string]string{"If-None-Match": "*"}, nil))
	ok("14 minutes slow", signed(t, "GET", key, nil, sigCreds, now.Add(-14*time.Minute), "", nil, nil))
	ok("14 minutes fast", signed(t, "GET", key, nil, sigCreds, now.Add(14*time.Minute), "", nil, nil))
	ok("query", signed(t, "GET", url+"/b?list-type=2&prefix=a%20b%2Fc&delimiter=%2F", nil, sigCreds, now, "", nil, nil))

	wrongSecret := fakes3.Credentials{AccessKeyID: sigCreds.AccessKeyID, SecretAccessKey: "nope"}
	refused("wrong secret", signed(t, "GET", key, nil, wrongSecret, now, "", nil, nil), 403, "SignatureDoesNotMatch")
	wrongID := fakes3.Credentials{AccessKeyID: "AKIDOTHER", SecretAccessKey: sigCreds.SecretAccessKey}
	refused("wrong access key", signed(t, "GET", key, nil, wrongID, now, "", nil, nil), 403, "InvalidAccessKeyId")
	refused("16 minutes slow", signed(t, "GET", key, nil, sigCreds, now.Add(-16*time.Minute), "", nil, nil), 403, "RequestTimeTooSkewed")
	refused("16 minutes fast", signed(t, "GET", key, nil, sigCreds, now.Add(16*time.Minute), "", nil, nil), 403, "RequestTimeTooSkewed")
	refused("body swapped", signed(t, "PUT", key, body, sigCreds, now, "", nil, func(r *http.Request) {
		r.Body = io.NopCloser(strings.NewReader("PAYLOAD"))
	}), 400, "XAmzContentSHA256Mismatch")
	refused("body and hash swapped", signed(t, "PUT", key, body, sigCreds, now, "", nil, func(r *http.Request) {
		r.Body = io.NopCloser(strings.NewReader("PAYLOAD"))
		r.Header.Set("X-Amz-Content-Sha256", payloadHash([]byte("PAYLOAD")))
	}), 403, "SignatureDoesNotMatch")
	refused("condition stripped", signed(t, "PUT", url+"/b/k3", body, sigCreds, now, "", map[string]string{"If-Match": `"x"`}, func(r *http.Request) {
		r.Header.Del("If-Match")
	}), 403, "SignatureDoesNotMatch")
	refused("unsigned condition added", signed(t, "PUT", key, body, sigCreds, now, "", nil, func(r *http.Request) {
		r.Header.Set("If-None-Match", "*")
	}), 403, "AccessDenied")
	refused("path changed", signed(t, "GET", key, nil, sigCreds, now, "", nil, func(r *http.Request) {
		r.URL.Path = "/b/k2"
	}), 403, "SignatureDoesNotMatch")
	refused("query changed", signed(t, "GET", url+"/b?list-type=2&prefix=a", nil, sigCreds, now, "", nil, func(r *http.Request) {
		r.URL.RawQuery = "list-type=2&prefix=b"
	}), 403, "SignatureDoesNotMatch")
	refused("no content hash", signed(t, "GET", key, nil, sigCreds, now, "", nil, func(r *http.Request) {
		r.Header.Del("X-Amz-Content-Sha256")
	}), 400, "InvalidRequest")
}

// Presigned URLs (query authentication) made by the SDK's signer work until
// they expire.
func TestServerSigV4Presigned(t *testing.T) {
	_, url := startServer(t, fakes3.ServerOptions{Buckets: []string{"b"}, Credentials: &sigCreds})
	now := time.Now()
	if st, b := send(t, signed(t, "PUT", url+"/b/k", []byte("v"), sigCreds, now, "", nil, nil)); st != 200 {
		t.Fatalf("put: %d %s", st, b)
	}
	presign := func(at time.Time, expires string, c fakes3.Credentials) string {
		req, err := http.NewRequest("GET", url+"/b/k?X-Amz-Expires="+expires, nil)
		if err != nil {
			t.Fatal(err)
		}
		u, _, err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).
			PresignHTTP(context.Background(), awsCreds(c), req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", at)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	st, _, body := rawRequest(t, "GET", presign(now, "60", sigCreds), nil, nil)
	if st != 200 || body != "v" {
		t.Fatalf("presigned GET: %d %s", st, body)
	}
	st, _, body = rawRequest(t, "GET", presign(now.Add(-2*time.Minute), "60", sigCreds), nil, nil)
	wantS3Error(t, "expired presigned GET", st, body, 403, "AccessDenied")
	st, _, body = rawRequest(t, "GET", presign(now, "60", fakes3.Credentials{AccessKeyID: sigCreds.AccessKeyID, SecretAccessKey: "x"}), nil, nil)
	wantS3Error(t, "presigned with a wrong secret", st, body, 403, "SignatureDoesNotMatch")
}

// The SDK's S3 client, through s3.Open, works against a checking
// server with keys that need escaping in the path and the query, and fails
// with ErrAccessDenied (DEED-E041) with the wrong secret.
func TestServerSigV4SDKClient(t *testing.T) {
	_, url := startServer(t, fakes3.ServerOptions{Buckets: []string{"b"}, Credentials: &sigCreds})
	open := func(c fakes3.Credentials) bucket.Bucket {
		b, err := s3.Open(t.Context(), bucket.Location{Bucket: "b"}, s3.Options{Endpoint: url,
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return awsCreds(c), nil })})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := open(sigCreds)
	for _, key := range []string{"plain", "sp ace/x", "plus+eq=amp&", "ünï/cödé", "star*paren()"} {
		if _, err := b.Put(t.Context(), key, []byte(key), bucket.IfAbsent); err != nil {
			t.Fatalf("put %q: %v", key, err)
		}
		obj, err := b.Get(t.Context(), key, 0)
		if err != nil || string(obj.Body) != key {
			t.Fatalf("get %q: %q %v", key, obj.Body, err)
		}
		page, err := b.List(t.Context(), bucket.ListInput{Prefix: key, Delimiter: "/"})
		if err != nil || len(page.Objects)+len(page.Prefixes) != 1 {
			t.Fatalf("list %q: %+v %v", key, page, err)
		}
	}
	_, err := open(fakes3.Credentials{AccessKeyID: sigCreds.AccessKeyID, SecretAccessKey: "wrong"}).Get(t.Context(), "plain", 0)
	if errcode.CodeOf(err) != errcode.CodeUnauthorized {
		t.Fatalf("wrong secret: %v, want %s", err, errcode.CodeUnauthorized)
	}
}

func TestCredentialsFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	c, path, created, err := fakes3.LoadOrCreateCredentials(dir)
	if err != nil || !created {
		t.Fatalf("first start: %v created=%v", err, created)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file mode: %v %v, want 0600", fi.Mode(), err)
	}
	if len(c.AccessKeyID) != 20 || len(c.SecretAccessKey) != 40 {
		t.Fatalf("generated %+v", c)
	}
	again, _, created, err := fakes3.LoadOrCreateCredentials(dir)
	if err != nil || created || again != c {
		t.Fatalf("second start: %+v created=%v %v, want the same %+v", again, created, err, c)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("dir holds %d entries, want only %s", len(entries), fakes3.CredentialsFile)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := fakes3.LoadOrCreateCredentials(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable file: %v, want a refusal", err)
	}
	if _, err := fakes3.LoadCredentials(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}
