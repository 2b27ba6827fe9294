// Package s3 implements bucket.Bucket over the S3 API, through
// aws-sdk-go-v2: AWS S3 and S3-compatible stores (versitygw, MinIO, deed's
// own fakes3 server). It lives apart from package bucket so that code using
// only the contract (owner, replication, the daemon client) does not pull
// in the AWS SDK.
//
// A store answer becomes a typed error in one place, classifySDK, which
// hands the HTTP status and S3 error code to bucket.Classify and so to the
// quirks table.
package s3

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
)

// DefaultRegion is used when neither Options.Region nor the AWS
// configuration (AWS_REGION, the shared config file) names one. S3-compatible
// stores mostly ignore the region, but SigV4 needs one to sign with.
const DefaultRegion = "us-east-1"

// Options configures Open. The zero value talks to AWS S3 with the
// default credential chain and region resolution.
type Options struct {
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
	// condition). 0 means bucket.DefaultWriteTimeout.
	Timeout time.Duration
	// HTTPClient replaces the SDK's HTTP client (for tests, proxies, TLS).
	// With AWS_CA_BUNDLE set, Open uses a copy whose transport trusts the
	// bundle's certificates (see caBundleClient).
	HTTPClient *http.Client
	// Credentials replaces the AWS default credential chain.
	Credentials aws.CredentialsProvider
}

// s3Bucket implements bucket.Bucket over aws-sdk-go-v2. Keys are absolute within
// the bucket; Open wraps it with bucket.WithPrefix.
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
	reads   *awss3.Client // retrying: Get, Head, List, unconditional Put/Delete
	writes  *awss3.Client // no retries: conditional Put/Delete
	timeout time.Duration
}

// Open returns a bucket.Bucket for loc over the S3 API. It does no I/O beyond
// loading the AWS configuration (credentials are fetched on first use), so a
// wrong endpoint or missing bucket shows up on the first request; run the
// probe to check a store before trusting it.
//
// The SDK's automatic request checksums and response validation are set to
// "when required": S3-compatible stores (gofakes3, versitygw, older MinIO)
// mishandle the aws-chunked trailer encoding the SDK uses for them, and deed
// does not need them because every body it writes carries its own CRC.
func Open(ctx context.Context, loc bucket.Location, opts Options) (bucket.Bucket, error) {
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

	// The SDK logs to the process's stderr on its own (the instance
	// metadata client's "WARN falling back to IMDSv1" when no credentials
	// are found): a line deed's caller did not ask for, without a code,
	// ahead of --json output. What it would say reaches the caller as the
	// error of the request it concerns.
	load := []func(*config.LoadOptions) error{config.WithLogger(logging.Nop{})}
	if opts.Region != "" {
		load = append(load, config.WithRegion(opts.Region))
	}
	if opts.Credentials != nil {
		load = append(load, config.WithCredentialsProvider(opts.Credentials))
	}
	client := opts.HTTPClient
	if bundle := os.Getenv(caBundleEnv); client != nil && bundle != "" {
		// The SDK can load a CA bundle only into an HTTP client it built
		// itself, and refuses to load the configuration when given another
		// one. So deed loads the bundle into the caller's transport and
		// hands the SDK that client only after loading: the SDK's own
		// client (which it gives the bundle too) serves nothing but the
		// credential providers it sets up while loading.
		var err error
		if client, err = caBundleClient(client, bundle); err != nil {
			return nil, fmt.Errorf("open s3 bucket %s: %s: %w", loc, caBundleEnv, err)
		}
	} else if client != nil {
		load = append(load, config.WithHTTPClient(client))
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, fmt.Errorf("open s3 bucket %s: load aws config: %w", loc, err)
	}
	if client != nil {
		cfg.HTTPClient = client
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	// Wrapped after loading, so that the configuration (a CA bundle, proxy
	// settings) still applies to the client underneath.
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = awshttp.NewBuildableClient()
	}
	if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok && opts.HTTPClient == nil {
		// deed's own client (a caller's is left as it is): keep enough
		// idle connections for the concurrent writes a daemon makes.
		cfg.HTTPClient = bc.WithTransportOptions(poolConns)
	}
	cfg.HTTPClient = s3Sniffer{cfg.HTTPClient}
	cfg.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	cfg.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired

	// By the time an option function runs, the SDK has already resolved
	// BaseEndpoint from AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL / the shared
	// config, so path-style follows whichever endpoint is actually used.
	common := func(o *awss3.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
		if opts.PathStyle != nil {
			o.UsePathStyle = *opts.PathStyle
		} else {
			o.UsePathStyle = o.BaseEndpoint != nil
		}
	}
	noRetry := func(o *awss3.Options) {
		o.Retryer = aws.NopRetryer{}
		o.RetryMaxAttempts = 1
	}
	b := &s3Bucket{
		name:    loc.Bucket,
		reads:   awss3.NewFromConfig(cfg, common),
		writes:  awss3.NewFromConfig(cfg, common, noRetry),
		timeout: opts.Timeout,
	}
	if b.timeout == 0 {
		b.timeout = bucket.DefaultWriteTimeout
	}
	if ep := b.reads.Options().BaseEndpoint; ep != nil && opts.Endpoint == "" {
		if err := checkEndpoint(*ep); err != nil {
			return nil, fmt.Errorf("open s3 bucket %s: endpoint from environment: %w", loc, err)
		}
	}
	return bucket.WithPrefix(b, loc.Prefix), nil
}

// IdleConnsPerHost is how many idle connections to the store deed's own
// HTTP client keeps for reuse (both its clients, reads and writes, share
// one pool). The SDK's default keeps 10, and a daemon writes to many cells
// at once (one PUT in flight per cell with a pending append): with 256
// concurrent writers, most requests found no idle connection and opened a
// new one, a TCP (and TLS) handshake each. Idle connections still close
// after the SDK's idle timeout (90 s). The number of connections open at
// once is not capped (MaxConnsPerHost stays 0): a cap would make writes
// queue inside the transport, where their timeout would turn into an
// unknown outcome for a request that was never sent.
const IdleConnsPerHost = 1024

// poolConns sets the idle-connection limits of deed's own transport.
func poolConns(tr *http.Transport) {
	tr.MaxIdleConnsPerHost = IdleConnsPerHost
	if tr.MaxIdleConns != 0 && tr.MaxIdleConns < IdleConnsPerHost {
		tr.MaxIdleConns = IdleConnsPerHost
	}
}

// caBundleEnv names the file of PEM certificates AWS tools trust for HTTPS
// instead of the system's roots.
const caBundleEnv = "AWS_CA_BUNDLE"

// caBundleClient returns a copy of c whose transport trusts exactly the
// certificates in the PEM file at path, as the SDK's own client does when
// AWS_CA_BUNDLE is set. c is not modified. A transport that already names
// its roots, or that is not an *http.Transport (nil means
// http.DefaultTransport), was configured by the caller on purpose and is
// used as it is.
func caBundleClient(c *http.Client, path string) (*http.Client, error) {
	rt := c.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	tr, ok := rt.(*http.Transport)
	if !ok || (tr.TLSClientConfig != nil && tr.TLSClientConfig.RootCAs != nil) {
		return c, nil
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA bundle: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", path)
	}
	tr = tr.Clone()
	if tr.TLSClientConfig == nil {
		tr.TLSClientConfig = &tls.Config{}
	}
	tr.TLSClientConfig.RootCAs = roots
	cc := *c
	cc.Transport = tr
	return &cc, nil
}

// checkEndpoint rejects endpoints the SDK would accept but mis-route, such as
// "localhost:9000" (parsed as scheme "localhost").
func checkEndpoint(raw string) error {
	// The endpoint may carry user:pass@: an error names it without them.
	if !strings.Contains(raw, "://") {
		shown := raw
		if _, host, ok := strings.Cut(raw, "@"); ok {
			shown = host
		}
		return fmt.Errorf("endpoint %q has no scheme: write http://%s (or https://%s)", shown, shown, shown)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // not the URL itself
		}
		return fmt.Errorf("parse endpoint: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("parse endpoint %q: want http(s)://HOST[:PORT]", u.Redacted())
	}
	return nil
}

// writeClient picks the client and context for a write: conditional writes
// go through the non-retrying client under the per-request timeout.
func (b *s3Bucket) writeClient(ctx context.Context, cond bucket.Condition) (*awss3.Client, context.Context, context.CancelFunc) {
	if !cond.Conditional() {
		return b.reads, ctx, func() {}
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	return b.writes, ctx, cancel
}

// notS3Header carries s3Sniffer's verdict on a response from the transport
// to classifySDK, past the SDK's deserializers, which consume the body.
const notS3Header = "X-Deed-Not-S3"

// s3Sniffer wraps the SDK's HTTP client to recognise an endpoint that is
// not an S3 store at all: the usual cause is --endpoint pointed at the
// wrong port (a deed daemon's API, a web server). Such an endpoint answers
// a GET of a key with a 404 that the SDK reads as NoSuchKey, so without
// this a wrong endpoint gives confident wrong answers ("never claimed").
// It looks at the first bytes of every error answer and marks the ones
// that are not S3's (see notS3); it changes nothing else.
type s3Sniffer struct{ inner aws.HTTPClient }

func (c s3Sniffer) Do(req *http.Request) (*http.Response, error) {
	resp, err := c.inner.Do(req)
	if err != nil || resp == nil {
		return resp, err
	}
	var peek []byte
	if resp.StatusCode >= 300 && resp.Body != nil {
		peek, _ = io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(peek), resp.Body), resp.Body}
	}
	if what := notS3(resp, peek); what != "" {
		resp.Header.Set(notS3Header, what)
	}
	return resp, err
}

// notS3 describes a response that no S3 store sends, or returns "". S3
// error answers carry an XML <Error> body (none on HEAD) or the
// x-amz-request-id / x-amz-id-2 headers; an HTML page, a JSON document or
// plain text does not come from S3. A body-less answer with no S3 header
// is judged by its Content-Type, and given the benefit of the doubt when
// it has none. A success answer is judged by its Content-Type only, and
// only matters when the SDK could not parse it (a listing).
func notS3(resp *http.Response, peek []byte) string {
	h := resp.Header
	if h.Get("X-Amz-Request-Id") != "" || h.Get("X-Amz-Id-2") != "" {
		return ""
	}
	ct := h.Get("Content-Type")
	media := strings.ToLower(strings.TrimSpace(strings.Split(ct, ";")[0]))
	markup := media == "text/html" || media == "text/plain" || media == "application/json" || strings.HasSuffix(media, "+json")
	body := bytes.TrimSpace(peek)
	switch {
	case resp.StatusCode < 300:
		if media != "text/html" && media != "application/json" {
			return ""
		}
	case len(body) == 0:
		if !markup {
			return ""
		}
	case bytes.HasPrefix(body, []byte("<")) && bytes.Contains(body, []byte("<Code>")) && !markup:
		return "" // an S3 XML error
	}
	what := fmt.Sprintf("HTTP %s", resp.Status)
	if ct != "" {
		what += ", Content-Type " + ct
	}
	if srv := h.Get("Server"); srv != "" {
		what += ", Server " + srv
	}
	if len(body) > 0 {
		what += fmt.Sprintf(", body %.120q", body)
	}
	if bytes.Contains(body, []byte(`"code":"DEED-E`)) {
		what += " (that is a deed daemon's API, not its store)"
	}
	return what
}

// notS3Status reports the statuses at which a non-S3 answer is definitive.
// A 5xx or a 408/429 from something in front of the store (a proxy's error
// page) is left to bucket.Classify: the request may have reached the store, and a
// conditional write may have landed, so it stays ambiguous.
func notS3Status(status int) bool {
	return status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests
}

// classify is classifySDK naming this bucket in an ErrNoBucket.
func (b *s3Bucket) classify(op, key string, cond bucket.Condition, err error) *bucket.OpError {
	oe := classifySDK(op, key, cond, err)
	oe.Bucket = b.name
	return oe
}

// classifySDK extracts the HTTP status and S3 error code from an SDK error and
// hands them to bucket.Classify, the one place that decides what they mean.
func classifySDK(op, key string, cond bucket.Condition, err error) *bucket.OpError {
	if noCredentials(err) {
		// The request was never sent (it could not be signed), so even a
		// conditional write is definitely not applied.
		return &bucket.OpError{Op: op, Key: key, Kind: bucket.ErrAccessDenied, Err: fmt.Errorf(
			"no usable AWS credentials (searched: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws, SSO, an instance role; "+
				"for deed's embedded and fake stores, load DIR/credentials.env): %w", err)}
	}
	var hr *smithyhttp.ResponseError
	if errors.As(err, &hr) && hr.Response != nil && hr.Response.Response != nil {
		if what := hr.Response.Header.Get(notS3Header); what != "" && notS3Status(hr.Response.StatusCode) {
			return &bucket.OpError{Op: op, Key: key, Kind: bucket.ErrNotS3, Status: hr.Response.StatusCode, Err: notS3Err(hr.Response.Request, what)}
		}
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
	return bucket.Classify(op, key, cond, status, code, err)
}

// notS3Err names what answered, and where.
func notS3Err(req *http.Request, what string) error {
	where := "the endpoint"
	if req != nil && req.URL != nil {
		where = req.URL.Scheme + "://" + req.URL.Host
	}
	return fmt.Errorf("%s answered %s; check --endpoint (or DEED_ENDPOINT / AWS_ENDPOINT_URL_S3): it must be the S3 store's URL", where, what)
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
	return errcode.Errorf(errcode.CodeBadRequest, "%s %q: %w", op, key, err)
}

// Get refuses an object over max from its Content-Length before reading the
// body, and reads at most max+1 bytes of a body whose length was not
// announced (or was announced wrong), so one request never holds more.
func (b *s3Bucket) Get(ctx context.Context, key string, max int64) (bucket.Object, error) {
	if err := bucket.ValidateKey(key); err != nil {
		return bucket.Object{}, badKey("get", key, err)
	}
	out, err := b.reads.GetObject(ctx, &awss3.GetObjectInput{Bucket: &b.name, Key: &key})
	if err != nil {
		return bucket.Object{}, b.classify("get", key, bucket.None, err)
	}
	defer out.Body.Close()
	obj := bucket.Object{Key: key, ETag: aws.ToString(out.ETag)}
	size := int64(-1)
	if out.ContentLength != nil {
		size = *out.ContentLength
	}
	return bucket.ReadBody(obj, out.Body, size, max)
}

func (b *s3Bucket) Head(ctx context.Context, key string) (bucket.Info, error) {
	if err := bucket.ValidateKey(key); err != nil {
		return bucket.Info{}, badKey("head", key, err)
	}
	out, err := b.reads.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: &b.name, Key: &key})
	if err != nil {
		return bucket.Info{}, b.classify("head", key, bucket.None, err)
	}
	return bucket.Info{
		Key:          key,
		ETag:         aws.ToString(out.ETag),
		Size:         aws.ToInt64(out.ContentLength),
		LastModified: aws.ToTime(out.LastModified),
	}, nil
}

// Put sends the condition as If-None-Match: * or If-Match with the ETag
// exactly as the store returned it (see QuirkETagQuoting).
func (b *s3Bucket) Put(ctx context.Context, key string, body []byte, cond bucket.Condition) (string, error) {
	if err := bucket.ValidateKey(key); err != nil {
		return "", badKey("put", key, err)
	}
	in := &awss3.PutObjectInput{
		Bucket:        &b.name,
		Key:           &key,
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
	}
	switch cond.Kind {
	case bucket.CondIfAbsent:
		in.IfNoneMatch = aws.String("*")
	case bucket.CondIfMatch:
		if cond.ETag == "" {
			return "", errcode.Errorf(errcode.CodeBadRequest, "put %q: if-match with an empty etag", key)
		}
		in.IfMatch = aws.String(cond.ETag)
	}
	client, ctx, cancel := b.writeClient(ctx, cond)
	defer cancel()
	out, err := client.PutObject(ctx, in)
	if err != nil {
		return "", b.classify("put", key, cond, err)
	}
	return aws.ToString(out.ETag), nil
}

// Delete sends If-Match when cond carries one. Unconditional deletes of a
// missing key succeed, as on S3, even on stores that answer 404.
func (b *s3Bucket) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	if err := bucket.ValidateKey(key); err != nil {
		return badKey("delete", key, err)
	}
	in := &awss3.DeleteObjectInput{Bucket: &b.name, Key: &key}
	switch cond.Kind {
	case bucket.CondIfMatch:
		if cond.ETag == "" {
			return errcode.Errorf(errcode.CodeBadRequest, "delete %q: if-match with an empty etag", key)
		}
		in.IfMatch = aws.String(cond.ETag)
	case bucket.CondIfAbsent:
		return errcode.Errorf(errcode.CodeBadRequest, "delete %q: if-absent is not a delete condition", key)
	}
	client, ctx, cancel := b.writeClient(ctx, cond)
	defer cancel()
	if _, err := client.DeleteObject(ctx, in); err != nil {
		oe := b.classify("delete", key, cond, err)
		if !cond.Conditional() && errors.Is(oe, bucket.ErrNotFound) {
			return nil
		}
		return oe
	}
	return nil
}

func (b *s3Bucket) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	req := &awss3.ListObjectsV2Input{Bucket: &b.name}
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
		return bucket.ListPage{}, b.classify("list", in.Prefix, bucket.None, err)
	}
	// A web page parses as an empty listing; an empty listing from
	// something that is not S3 would be a confident wrong answer.
	if raw, ok := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response); ok && raw.Response != nil {
		if what := raw.Header.Get(notS3Header); what != "" {
			return bucket.ListPage{}, &bucket.OpError{Op: "list", Key: in.Prefix, Kind: bucket.ErrNotS3, Status: raw.StatusCode, Err: notS3Err(raw.Request, what)}
		}
	}
	var page bucket.ListPage
	for _, o := range out.Contents {
		page.Objects = append(page.Objects, bucket.Info{
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
			return bucket.ListPage{}, bucket.Classify("list", in.Prefix, bucket.None, 200, "",
				errors.New("truncated listing without a continuation token"))
		}
	}
	return page, nil
}

var _ bucket.Bucket = (*s3Bucket)(nil)
