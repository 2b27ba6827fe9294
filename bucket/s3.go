package bucket

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// DefaultRegion is used when neither S3Options.Region nor the AWS
// configuration (AWS_REGION, the shared config file) names one. S3-compatible
// stores mostly ignore the region, but SigV4 needs one to sign with.
const DefaultRegion = "us-east-1"

// DefaultWriteTimeout bounds one conditional write when S3Options.Timeout is
// zero. A conditional write is never retried by the SDK, so a hung request
// must end on its own for the caller to resolve the ambiguity by reading.
const DefaultWriteTimeout = 10 * time.Second

// S3Options configures OpenS3. The zero value talks to AWS S3 with the
// default credential chain and region resolution.
type S3Options struct {
	// Endpoint is the S3 endpoint URL, for S3-compatible stores. When empty,
	// the SDK's own resolution applies: AWS_ENDPOINT_URL_S3, then
	// AWS_ENDPOINT_URL, then the shared config file, then AWS.
	Endpoint string
	// Region is the signing region; "" means AWS_REGION / the shared config,
	// else DefaultRegion.
	Region string
	// PathStyle selects path-style addressing (http://host/bucket/key).
	// nil means: path-style when a custom endpoint is in use (from Endpoint or
	// the environment), because S3-compatible stores rarely have the wildcard
	// DNS that virtual-hosted style needs; virtual-hosted on AWS.
	PathStyle *bool
	// Timeout bounds each conditional write (Put or Delete with a
	// condition). 0 means DefaultWriteTimeout.
	Timeout time.Duration
	// HTTPClient replaces the SDK's HTTP client (for tests, proxies, TLS).
	HTTPClient *http.Client
	// Credentials replaces the AWS default credential chain.
	Credentials aws.CredentialsProvider
}

// s3Bucket implements Bucket over aws-sdk-go-v2. Keys are absolute within
// the bucket; OpenS3 wraps it with WithPrefix.
//
// It holds two clients because the two kinds of request need opposite retry
// policies. Reads and unconditional writes are idempotent, so the SDK's
// retries only help. A conditional write must never be retried by the SDK:
// if the first attempt landed but its response was lost, the retry collides
// with the attempt's own result and reports a false 412, and the caller would
// believe it lost a race it won. Conditional writes therefore go out once,
// under an explicit timeout, and every failure without a definite answer is
// ErrAmbiguous for the caller to resolve by reading the key.
type s3Bucket struct {
	name    string
	reads   *s3.Client // retrying: Get, Head, List, unconditional Put/Delete
	writes  *s3.Client // no retries: conditional Put/Delete
	timeout time.Duration
}

// OpenS3 returns a Bucket for loc over the S3 API. It does no I/O beyond
// loading the AWS configuration (credentials are fetched on first use), so a
// wrong endpoint or missing bucket shows up on the first request; run the
// probe to check a store before trusting it.
//
// The SDK's automatic request checksums and response validation are set to
// "when required": S3-compatible stores (gofakes3, versitygw, older MinIO)
// mishandle the aws-chunked trailer encoding the SDK uses for them, and deed
// does not need them because every body it writes carries its own CRC.
func OpenS3(ctx context.Context, loc Location, opts S3Options) (Bucket, error) {
	if loc.Bucket == "" {
		return nil, fmt.Errorf("open s3 bucket: empty bucket name")
	}
	if loc.Scheme != "" && loc.Scheme != "s3" {
		return nil, fmt.Errorf("open s3 bucket: %s is not an s3:// location", loc)
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("open s3 bucket %s: negative timeout %v", loc, opts.Timeout)
	}
	if opts.Endpoint != "" {
		if err := checkEndpoint(opts.Endpoint); err != nil {
			return nil, fmt.Errorf("open s3 bucket %s: %w", loc, err)
		}
	}

	var load []func(*config.LoadOptions) error
	if opts.Region != "" {
		load = append(load, config.WithRegion(opts.Region))
	}
	if opts.Credentials != nil {
		load = append(load, config.WithCredentialsProvider(opts.Credentials))
	}
	if opts.HTTPClient != nil {
		load = append(load, config.WithHTTPClient(opts.HTTPClient))
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, fmt.Errorf("open s3 bucket %s: load aws config: %w", loc, err)
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	cfg.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	cfg.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired

	// By the time an option function runs, the SDK has already resolved
	// BaseEndpoint from AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL / the shared
	// config, so path-style follows whichever endpoint is actually used.
	common := func(o *s3.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
		if opts.PathStyle != nil {
			o.UsePathStyle = *opts.PathStyle
		} else {
			o.UsePathStyle = o.BaseEndpoint != nil
		}
	}
	noRetry := func(o *s3.Options) {
		o.Retryer = aws.NopRetryer{}
		o.RetryMaxAttempts = 1
	}
	b := &s3Bucket{
		name:    loc.Bucket,
		reads:   s3.NewFromConfig(cfg, common),
		writes:  s3.NewFromConfig(cfg, common, noRetry),
		timeout: opts.Timeout,
	}
	if b.timeout == 0 {
		b.timeout = DefaultWriteTimeout
	}
	if ep := b.reads.Options().BaseEndpoint; ep != nil && opts.Endpoint == "" {
		if err := checkEndpoint(*ep); err != nil {
			return nil, fmt.Errorf("open s3 bucket %s: endpoint from environment: %w", loc, err)
		}
	}
	return WithPrefix(b, loc.Prefix), nil
}

// checkEndpoint rejects endpoints the SDK would accept but mis-route, such as
// "localhost:9000" (parsed as scheme "localhost").
func checkEndpoint(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("parse endpoint %q: %w", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("parse endpoint %q: want http(s)://HOST[:PORT]", raw)
	}
	return nil
}

// writeClient picks the client and context for a write: conditional writes
// go through the non-retrying client under the per-request timeout.
func (b *s3Bucket) writeClient(ctx context.Context, cond Condition) (*s3.Client, context.Context, context.CancelFunc) {
	if !cond.Conditional() {
		return b.reads, ctx, func() {}
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	return b.writes, ctx, cancel
}

// classifySDK extracts the HTTP status and S3 error code from an SDK error and
// hands them to Classify, the one place that decides what they mean.
func classifySDK(op, key string, cond Condition, err error) *OpError {
	if noCredentials(err) {
		// The request was never sent (it could not be signed), so even a
		// conditional write is definitely not applied.
		return &OpError{Op: op, Key: key, Kind: ErrAccessDenied, Err: fmt.Errorf(
			"no usable AWS credentials (searched: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws, SSO, an instance role; "+
				"deed's embedded and fake stores accept any values): %w", err)}
	}
	status, code := 0, ""
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	return Classify(op, key, cond, status, code, err)
}

// noCredentials reports the SDK's failure to find credentials. It arrives
// as a plain wrapped error ("get identity: get credentials: …") from the
// signing step, with no type to match; it may carry the 403 of an
// instance-metadata probe, which would otherwise read as a store refusing
// the request, or no status at all, which would read as the store being
// down.
func noCredentials(err error) bool {
	return strings.Contains(err.Error(), "get identity: ")
}

// badKey reports a key deed refuses to send: S3 stores and path-style
// proxies normalise some keys ("a/../b"), silently aliasing two of them.
func badKey(op, key string, err error) error {
	return Errorf(CodeBadRequest, "%s %q: %w", op, key, err)
}

// Get refuses an object over max from its Content-Length before reading the
// body, and reads at most max+1 bytes of a body whose length was not
// announced (or was announced wrong), so one request never holds more.
func (b *s3Bucket) Get(ctx context.Context, key string, max int64) (Object, error) {
	if err := ValidateKey(key); err != nil {
		return Object{}, badKey("get", key, err)
	}
	out, err := b.reads.GetObject(ctx, &s3.GetObjectInput{Bucket: &b.name, Key: &key})
	if err != nil {
		return Object{}, classifySDK("get", key, None, err)
	}
	defer out.Body.Close()
	obj := Object{Key: key, ETag: aws.ToString(out.ETag)}
	if size := aws.ToInt64(out.ContentLength); max > 0 && size > max {
		return obj, TooLarge(key, size, max)
	}
	var r io.Reader = out.Body
	if max > 0 {
		r = io.LimitReader(out.Body, max+1)
	}
	body, err := io.ReadAll(r)
	if err != nil {
		// The status was 200 but the body did not arrive whole.
		return Object{}, Classify("get", key, None, 0, "", fmt.Errorf("read body: %w", err))
	}
	if max > 0 && int64(len(body)) > max {
		return obj, TooLarge(key, -1, max)
	}
	obj.Body = body
	return obj, nil
}

func (b *s3Bucket) Head(ctx context.Context, key string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, badKey("head", key, err)
	}
	out, err := b.reads.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.name, Key: &key})
	if err != nil {
		return Info{}, classifySDK("head", key, None, err)
	}
	return Info{
		Key:          key,
		ETag:         aws.ToString(out.ETag),
		Size:         aws.ToInt64(out.ContentLength),
		LastModified: aws.ToTime(out.LastModified),
	}, nil
}

// Put sends the condition as If-None-Match: * or If-Match with the ETag
// exactly as the store returned it (see QuirkETagQuoting).
func (b *s3Bucket) Put(ctx context.Context, key string, body []byte, cond Condition) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", badKey("put", key, err)
	}
	in := &s3.PutObjectInput{
		Bucket:        &b.name,
		Key:           &key,
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
	}
	switch cond.Kind {
	case CondIfAbsent:
		in.IfNoneMatch = aws.String("*")
	case CondIfMatch:
		if cond.ETag == "" {
			return "", Errorf(CodeBadRequest, "put %q: if-match with an empty etag", key)
		}
		in.IfMatch = aws.String(cond.ETag)
	}
	client, ctx, cancel := b.writeClient(ctx, cond)
	defer cancel()
	out, err := client.PutObject(ctx, in)
	if err != nil {
		return "", classifySDK("put", key, cond, err)
	}
	return aws.ToString(out.ETag), nil
}

// Delete sends If-Match when cond carries one. Unconditional deletes of a
// missing key succeed, as on S3, even on stores that answer 404.
func (b *s3Bucket) Delete(ctx context.Context, key string, cond Condition) error {
	if err := ValidateKey(key); err != nil {
		return badKey("delete", key, err)
	}
	in := &s3.DeleteObjectInput{Bucket: &b.name, Key: &key}
	switch cond.Kind {
	case CondIfMatch:
		if cond.ETag == "" {
			return Errorf(CodeBadRequest, "delete %q: if-match with an empty etag", key)
		}
		in.IfMatch = aws.String(cond.ETag)
	case CondIfAbsent:
		return Errorf(CodeBadRequest, "delete %q: if-absent is not a delete condition", key)
	}
	client, ctx, cancel := b.writeClient(ctx, cond)
	defer cancel()
	if _, err := client.DeleteObject(ctx, in); err != nil {
		oe := classifySDK("delete", key, cond, err)
		if !cond.Conditional() && errors.Is(oe, ErrNotFound) {
			return nil
		}
		return oe
	}
	return nil
}

func (b *s3Bucket) List(ctx context.Context, in ListInput) (ListPage, error) {
	req := &s3.ListObjectsV2Input{Bucket: &b.name}
	if in.Prefix != "" {
		req.Prefix = aws.String(in.Prefix)
	}
	if in.Delimiter != "" {
		req.Delimiter = aws.String(in.Delimiter)
	}
	if in.Token != "" {
		req.ContinuationToken = aws.String(in.Token)
	} else if in.StartAfter != "" {
		req.StartAfter = aws.String(in.StartAfter)
	}
	if in.MaxKeys > 0 {
		req.MaxKeys = aws.Int32(int32(min(in.MaxKeys, 1000)))
	}
	out, err := b.reads.ListObjectsV2(ctx, req)
	if err != nil {
		return ListPage{}, classifySDK("list", in.Prefix, None, err)
	}
	var page ListPage
	for _, o := range out.Contents {
		page.Objects = append(page.Objects, Info{
			Key:          aws.ToString(o.Key),
			ETag:         aws.ToString(o.ETag),
			Size:         aws.ToInt64(o.Size),
			LastModified: aws.ToTime(o.LastModified),
		})
	}
	for _, p := range out.CommonPrefixes {
		page.Prefixes = append(page.Prefixes, aws.ToString(p.Prefix))
	}
	if aws.ToBool(out.IsTruncated) {
		page.NextToken = aws.ToString(out.NextContinuationToken)
		if page.NextToken == "" {
			// Returning a page without a token would end the caller's listing
			// early and silently; a chain walk must never see a short list.
			return ListPage{}, Classify("list", in.Prefix, None, 200, "",
				errors.New("truncated listing without a continuation token"))
		}
	}
	return page, nil
}

var _ Bucket = (*s3Bucket)(nil)
