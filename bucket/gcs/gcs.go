// Package gcs implements bucket.Bucket on Google Cloud Storage, through
// cloud.google.com/go/storage's JSON API.
//
// GCS has the conditional write deed rests on, under another name: every
// object version has a generation number, and a write can be made
// conditional on it. Create-only is ifGenerationMatch=0 and "replace exactly
// the version read" is ifGenerationMatch=<generation>. The generation is
// therefore what this package hands out as the ETag: Put, Get, Head and List
// all report the object's generation as a decimal string, and Put and Delete
// with bucket.IfMatch send it back as ifGenerationMatch. (GCS's own ETag
// field is not used: no write precondition takes it.) The metageneration is
// left out, because deed never changes an object's metadata without
// replacing its content, and a content write always gets a new generation.
//
// A store answer becomes a typed error in one place, classify, which hands
// the HTTP status to bucket.Classify and so to the quirks table.
package gcs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
)

// EnvEmulatorHost is the variable the GCS SDK reads to talk to an emulator
// (fake-gcs-server) without credentials, as HOST:PORT or a URL.
const EnvEmulatorHost = "STORAGE_EMULATOR_HOST"

// Options configures Open. The zero value talks to GCS with Application
// Default Credentials, or to the emulator named by STORAGE_EMULATOR_HOST.
type Options struct {
	// Endpoint is the store's base URL (http://127.0.0.1:4443) for an
	// emulator; requests then go unauthenticated. "" means GCS, or
	// STORAGE_EMULATOR_HOST when set.
	Endpoint string
	// Timeout bounds each conditional write; 0 means
	// bucket.DefaultWriteTimeout.
	Timeout time.Duration
	// HTTPClient replaces the SDK's HTTP client (tests). Requests made
	// through it are not authenticated by the SDK.
	HTTPClient *http.Client
}

// gcsBucket implements bucket.Bucket. Keys are absolute within the bucket;
// Open wraps it with bucket.WithPrefix.
//
// Retries: the SDK retries any request it deems idempotent, and it counts
// a write with a generation precondition as idempotent. For deed it is
// not: if the first attempt landed and its answer was lost, the retry
// meets the generation the first attempt created and reports a false 412,
// and the caller would believe it lost a race it won. Conditional writes
// therefore go out once (storage.RetryNever on the object handle) under
// a timeout, and every failure without a definite answer is
// bucket.ErrAmbiguous. Reads and unconditional writes keep the SDK's
// retries.
type gcsBucket struct {
	client  *storage.Client
	bkt     *storage.BucketHandle
	timeout time.Duration
}

// Open returns a bucket.Bucket for a gs:// location. It does no I/O: a
// wrong bucket or missing permission shows on the first request (run the
// probe to check a store before trusting it).
func Open(ctx context.Context, loc bucket.Location, opts Options) (bucket.Bucket, error) {
	if loc.Bucket == "" {
		return nil, fmt.Errorf("open gcs bucket: empty bucket name")
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("open gcs bucket %s: negative timeout %v", loc, opts.Timeout)
	}
	copts := []option.ClientOption{storage.WithJSONReads()}
	if opts.Endpoint != "" {
		u, err := url.Parse(opts.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("open gcs bucket %s: endpoint %q: want http(s)://HOST[:PORT]", loc, opts.Endpoint)
		}
		copts = append(copts, option.WithEndpoint(strings.TrimSuffix(opts.Endpoint, "/")+"/storage/v1/"),
			option.WithoutAuthentication())
	}
	if opts.HTTPClient != nil {
		copts = append(copts, option.WithHTTPClient(opts.HTTPClient))
	}
	client, err := storage.NewClient(ctx, copts...)
	if err != nil {
		return nil, fmt.Errorf("open gcs bucket %s: %w", loc, err)
	}
	b := &gcsBucket{client: client, bkt: client.Bucket(loc.Bucket), timeout: opts.Timeout}
	if b.timeout == 0 {
		b.timeout = bucket.DefaultWriteTimeout
	}
	return bucket.WithPrefix(b, loc.Prefix), nil
}

// etag renders a generation as the ETag deed hands around.
func etag(gen int64) string { return strconv.FormatInt(gen, 10) }

// generation parses an ETag from etag back into a generation. Quotes are
// ignored (bucket.UnquoteETag), as callers may quote ETags. A value that
// is no generation (an S3 or Azure ETag, say) names no version this
// bucket can hold, so the If-Match cannot hold: ErrPrecondition, with
// nothing sent. An empty one is a caller's mistake.
func generation(op, key, tag string) (int64, error) {
	if tag == "" {
		return 0, errcode.Errorf(errcode.CodeBadRequest, "%s %q: if-match with an empty etag", op, key)
	}
	g, err := strconv.ParseInt(bucket.UnquoteETag(tag), 10, 64)
	if err != nil || g <= 0 {
		return 0, &bucket.OpError{Op: op, Key: key, Kind: bucket.ErrPrecondition,
			Err: fmt.Errorf("if-match etag %q is not a GCS generation (a positive decimal number)", tag)}
	}
	return g, nil
}

// object returns the handle for key, with the write's precondition and,
// for a conditional write, no retries and the write timeout.
func (b *gcsBucket) object(ctx context.Context, op, key string, cond bucket.Condition) (*storage.ObjectHandle, context.Context, context.CancelFunc, error) {
	o := b.bkt.Object(key)
	switch cond.Kind {
	case bucket.CondNone:
		return o, ctx, func() {}, nil
	case bucket.CondIfAbsent:
		o = o.If(storage.Conditions{DoesNotExist: true})
	case bucket.CondIfMatch:
		g, err := generation(op, key, cond.ETag)
		if err != nil {
			return nil, nil, nil, err
		}
		o = o.If(storage.Conditions{GenerationMatch: g})
	}
	o = o.Retryer(storage.WithPolicy(storage.RetryNever))
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	return o, ctx, cancel, nil
}

// classifyErr is the one place a GCS answer becomes a typed error: it finds
// the HTTP status and GCS reason in the SDK's error and hands them to
// bucket.Classify. GCS answers a failed generation precondition with 412
// (conditionNotMet), a create-only write on an existing object included,
// and an If-Match write on a missing object too, so no quirk of the S3
// family needs to apply. A 404 on an upload or a listing can only mean the
// bucket is missing (no object has to exist for either); it is reported as
// S3's NoSuchBucket, which no quirk reinterprets as a precondition failure.
func classifyErr(op, key string, cond bucket.Condition, err error) *bucket.OpError {
	status, code := 0, ""
	var ge *googleapi.Error
	switch {
	case errors.Is(err, storage.ErrObjectNotExist):
		status, code = http.StatusNotFound, "NoSuchKey"
	case errors.Is(err, storage.ErrBucketNotExist):
		status, code = http.StatusNotFound, "NoSuchBucket"
	case errors.As(err, &ge):
		status = ge.Code
		if len(ge.Errors) > 0 {
			code = ge.Errors[0].Reason
		}
	case noCredentials(err):
		// The request could not be authorised, so it was never sent: even a
		// conditional write is definitely not applied.
		return &bucket.OpError{Op: op, Key: key, Kind: bucket.ErrAccessDenied, Err: fmt.Errorf(
			"no usable Google credentials (Application Default Credentials: GOOGLE_APPLICATION_CREDENTIALS, "+
				"gcloud auth application-default login, or the metadata server; %s for an emulator): %w", EnvEmulatorHost, err)}
	}
	if status == http.StatusNotFound && (op == "put" || op == "list") {
		code = "NoSuchBucket"
	}
	return bucket.Classify(op, key, cond, status, code, err)
}

// noCredentials reports the auth library's failure to find credentials,
// which arrives as a plain error before any request is sent.
func noCredentials(err error) bool {
	return strings.Contains(err.Error(), "could not find default credentials")
}

func badKey(op, key string, err error) error {
	return errcode.Errorf(errcode.CodeBadRequest, "%s %q: %w", op, key, err)
}

// classify is classifyErr naming this bucket in an ErrNoBucket.
func (b *gcsBucket) classify(op, key string, cond bucket.Condition, err error) *bucket.OpError {
	oe := classifyErr(op, key, cond, err)
	oe.Bucket = b.bkt.BucketName()
	return oe
}

// Get refuses an object over max from the size GCS announces before
// reading its body, and reads at most max+1 bytes otherwise.
func (b *gcsBucket) Get(ctx context.Context, key string, max int64) (bucket.Object, error) {
	if err := bucket.ValidateKey(key); err != nil {
		return bucket.Object{}, badKey("get", key, err)
	}
	r, err := b.bkt.Object(key).NewReader(ctx)
	if err != nil {
		return bucket.Object{}, b.classify("get", key, bucket.None, err)
	}
	defer r.Close()
	obj := bucket.Object{Key: key, ETag: etag(r.Attrs.Generation)}
	return bucket.ReadBody(obj, r, r.Attrs.Size, max)
}

func (b *gcsBucket) Head(ctx context.Context, key string) (bucket.Info, error) {
	if err := bucket.ValidateKey(key); err != nil {
		return bucket.Info{}, badKey("head", key, err)
	}
	a, err := b.bkt.Object(key).Attrs(ctx)
	if err != nil {
		return bucket.Info{}, b.classify("head", key, bucket.None, err)
	}
	return bucket.Info{Key: key, ETag: etag(a.Generation), Size: a.Size, LastModified: a.Updated}, nil
}

// Put uploads body in one request (ChunkSize 0: no resumable session, so
// the write is one atomic request like S3's PutObject) and returns the new
// generation.
func (b *gcsBucket) Put(ctx context.Context, key string, body []byte, cond bucket.Condition) (string, error) {
	if err := bucket.ValidateKey(key); err != nil {
		return "", badKey("put", key, err)
	}
	o, ctx, cancel, err := b.object(ctx, "put", key, cond)
	if err != nil {
		return "", err
	}
	defer cancel()
	// The writer's context is cancelled on return: an upload still in
	// flight then is abandoned, and its outcome is ambiguous, as reported.
	w := o.NewWriter(ctx)
	w.ChunkSize = 0
	w.ContentType = "application/octet-stream"
	if _, err := io.Copy(w, bytes.NewReader(body)); err != nil {
		_ = w.Close()
		return "", b.classify("put", key, cond, err)
	}
	if err := w.Close(); err != nil {
		return "", b.classify("put", key, cond, err)
	}
	return etag(w.Attrs().Generation), nil
}

// Delete sends ifGenerationMatch when cond carries one. Unconditional
// deletes of a missing key succeed, as on S3.
func (b *gcsBucket) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	if err := bucket.ValidateKey(key); err != nil {
		return badKey("delete", key, err)
	}
	if cond.Kind == bucket.CondIfAbsent {
		return errcode.Errorf(errcode.CodeBadRequest, "delete %q: if-absent is not a delete condition", key)
	}
	o, ctx, cancel, err := b.object(ctx, "delete", key, cond)
	if err != nil {
		return err
	}
	defer cancel()
	if err := o.Delete(ctx); err != nil {
		oe := b.classify("delete", key, cond, err)
		if !cond.Conditional() && errors.Is(oe, bucket.ErrNotFound) {
			return nil
		}
		return oe
	}
	return nil
}

// List pages with the SDK's page token. GCS's StartOffset is inclusive,
// so the key equal to StartAfter is dropped from the page.
func (b *gcsBucket) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	q := &storage.Query{Prefix: in.Prefix, Delimiter: in.Delimiter}
	if in.Token == "" && in.StartAfter != "" {
		q.StartOffset = in.StartAfter
	}
	if err := q.SetAttrSelection([]string{"Name", "Generation", "Size", "Updated"}); err != nil {
		return bucket.ListPage{}, fmt.Errorf("list %q: %w", in.Prefix, err)
	}
	size := 1000
	if in.MaxKeys > 0 {
		size = min(in.MaxKeys, 1000)
	}
	var attrs []*storage.ObjectAttrs
	next, err := iterator.NewPager(b.bkt.Objects(ctx, q), size, in.Token).NextPage(&attrs)
	if err != nil {
		return bucket.ListPage{}, b.classify("list", in.Prefix, bucket.None, err)
	}
	page := bucket.ListPage{NextToken: next}
	for _, a := range attrs {
		switch {
		case a.Prefix != "":
			page.Prefixes = append(page.Prefixes, a.Prefix)
		case in.Token == "" && in.StartAfter != "" && a.Name <= in.StartAfter:
			// StartOffset is inclusive; StartAfter is not.
		default:
			page.Objects = append(page.Objects, bucket.Info{
				Key: a.Name, ETag: etag(a.Generation), Size: a.Size, LastModified: a.Updated,
			})
		}
	}
	return page, nil
}

var _ bucket.Bucket = (*gcsBucket)(nil)
