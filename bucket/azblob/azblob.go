// Package azblob implements bucket.Bucket on an Azure Blob Storage
// container, through github.com/Azure/azure-sdk-for-go/sdk/storage/azblob.
//
// Azure's Put Blob takes the same conditions as S3's PutObject:
// If-None-Match: * creates only, If-Match: <etag> replaces exactly the
// version read, and a blob's ETag changes with every write. Writes go out
// as one Put Blob request (never staged blocks, whose commit would be a
// second, separately conditioned request).
//
// A store answer becomes a typed error in one place, classify, which hands
// the HTTP status and Azure's error code to bucket.Classify and so to the
// quirks table.
package azblob

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
)

// The environment variables OptionsFromEnv reads; the names are the ones
// Azure's own tools use.
const (
	EnvConnectionString = "AZURE_STORAGE_CONNECTION_STRING"
	EnvAccount          = "AZURE_STORAGE_ACCOUNT"
	EnvKey              = "AZURE_STORAGE_KEY"
)

// Options configures Open. Credentials are tried in this order: a
// connection string, an account key, then Azure's default credential chain
// (environment service principal, workload identity, managed identity,
// Azure CLI) for Account.
type Options struct {
	// ConnectionString is a storage connection string (it names the account,
	// its key and its endpoint; Azurite's is the usual one in tests).
	ConnectionString string
	// Account is the storage account name.
	Account string
	// AccountKey is the account's shared key; "" means the default
	// credential chain.
	AccountKey string
	// Endpoint is the blob service URL; "" means
	// https://ACCOUNT.blob.core.windows.net. An emulator's includes the
	// account: http://127.0.0.1:10000/devstoreaccount1.
	Endpoint string
	// Timeout bounds each conditional write; 0 means
	// bucket.DefaultWriteTimeout.
	Timeout time.Duration
	// HTTPClient replaces the SDK's transport (tests).
	HTTPClient *http.Client
}

// OptionsFromEnv fills Options from AZURE_STORAGE_CONNECTION_STRING,
// AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY.
func OptionsFromEnv(getenv func(string) string) Options {
	return Options{
		ConnectionString: getenv(EnvConnectionString),
		Account:          getenv(EnvAccount),
		AccountKey:       getenv(EnvKey),
	}
}

// azBucket implements bucket.Bucket. Keys are absolute within the
// container; Open wraps it with bucket.WithPrefix.
//
// It holds two clients because the two kinds of request need opposite retry
// policies. The SDK retries every failed request by default, conditional
// Put Blob included; if the first attempt landed and its answer was lost,
// the retry meets the attempt's own ETag and reports a false 412, and the
// caller would believe it lost a race it won. Conditional writes therefore
// go out once (MaxRetries < 0) under a timeout, and every failure without
// a definite answer is bucket.ErrAmbiguous. Reads and unconditional writes
// keep the SDK's retries.
type azBucket struct {
	reads   *container.Client
	writes  *container.Client
	timeout time.Duration
}

// Open returns a bucket.Bucket for an az:// location. It does no I/O: a
// wrong container or missing permission shows on the first request (run
// the probe to check a store before trusting it).
func Open(ctx context.Context, loc bucket.Location, opts Options) (bucket.Bucket, error) {
	if loc.Bucket == "" {
		return nil, fmt.Errorf("open azure container: empty container name")
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("open azure container %s: negative timeout %v", loc, opts.Timeout)
	}
	reads, err := newClient(loc.Bucket, opts, false)
	if err != nil {
		return nil, fmt.Errorf("open azure container %s: %w", loc, err)
	}
	writes, err := newClient(loc.Bucket, opts, true)
	if err != nil {
		return nil, fmt.Errorf("open azure container %s: %w", loc, err)
	}
	b := &azBucket{reads: reads, writes: writes, timeout: opts.Timeout}
	if b.timeout == 0 {
		b.timeout = bucket.DefaultWriteTimeout
	}
	return bucket.WithPrefix(b, loc.Prefix), nil
}

func newClient(name string, opts Options, noRetry bool) (*container.Client, error) {
	co := &container.ClientOptions{}
	if noRetry {
		co.Retry = policy.RetryOptions{MaxRetries: -1}
	}
	if opts.HTTPClient != nil {
		co.Transport = opts.HTTPClient
	}
	if opts.ConnectionString != "" {
		return container.NewClientFromConnectionString(opts.ConnectionString, name, co)
	}
	if opts.Account == "" {
		return nil, fmt.Errorf("no account: set %s, or %s (with %s, or credentials for Azure's default chain)",
			EnvConnectionString, EnvAccount, EnvKey)
	}
	endpoint := opts.Endpoint
	if endpoint == "" {
		endpoint = "https://" + opts.Account + ".blob.core.windows.net"
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("endpoint %q: want http(s)://HOST[:PORT][/ACCOUNT]", endpoint)
	}
	curl := strings.TrimSuffix(endpoint, "/") + "/" + url.PathEscape(name)
	if opts.AccountKey != "" {
		cred, err := container.NewSharedKeyCredential(opts.Account, opts.AccountKey)
		if err != nil {
			return nil, fmt.Errorf("account key: %w", err)
		}
		return container.NewClientWithSharedKeyCredential(curl, cred, co)
	}
	cred, err := azidentity.NewDefaultAzureCredential(nil)
	if err != nil {
		return nil, fmt.Errorf("azure default credentials: %w", err)
	}
	return container.NewClient(curl, cred, co)
}

// writeClient picks the client and context for a write: conditional writes
// go through the non-retrying client under the write timeout.
func (b *azBucket) writeClient(ctx context.Context, cond bucket.Condition) (*container.Client, context.Context, context.CancelFunc) {
	if !cond.Conditional() {
		return b.reads, ctx, func() {}
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	return b.writes, ctx, cancel
}

// classify is the one place an Azure answer becomes a typed error: it
// finds the HTTP status and Azure error code in the SDK's error and hands
// them to bucket.Classify, where the quirks table reads Azure's 409
// BlobAlreadyExists on a create-only write as a failed precondition
// (QuirkAzureCreateExists409). ContainerNotFound is reported as S3's
// NoSuchBucket, which no quirk reinterprets as a precondition failure.
func classify(op, key string, cond bucket.Condition, err error) *bucket.OpError {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		code := re.ErrorCode
		if code == "ContainerNotFound" {
			code = "NoSuchBucket"
		}
		return bucket.Classify(op, key, cond, re.StatusCode, code, err)
	}
	var af *azidentity.AuthenticationFailedError
	if errors.As(err, &af) || strings.Contains(err.Error(), "DefaultAzureCredential") {
		// No token, so the request was never sent: even a conditional
		// write is definitely not applied.
		return &bucket.OpError{Op: op, Key: key, Kind: bucket.ErrAccessDenied, Err: fmt.Errorf(
			"no usable Azure credentials (%s, %s with %s, or Azure's default chain): %w",
			EnvConnectionString, EnvAccount, EnvKey, err)}
	}
	return bucket.Classify(op, key, cond, 0, "", err)
}

func badKey(op, key string, err error) error {
	return errcode.Errorf(errcode.CodeBadRequest, "%s %q: %w", op, key, err)
}

func etagOf(e *azcore.ETag) string {
	if e == nil {
		return ""
	}
	return string(*e)
}

func access(cond bucket.Condition) *blob.AccessConditions {
	var m blob.ModifiedAccessConditions
	switch cond.Kind {
	case bucket.CondIfAbsent:
		m.IfNoneMatch = new(azcore.ETagAny)
	case bucket.CondIfMatch:
		m.IfMatch = new(azcore.ETag(cond.ETag))
	default:
		return nil
	}
	return &blob.AccessConditions{ModifiedAccessConditions: &m}
}

// Get refuses an object over max from its Content-Length before reading
// the body, and reads at most max+1 bytes otherwise.
func (b *azBucket) Get(ctx context.Context, key string, max int64) (bucket.Object, error) {
	if err := bucket.ValidateKey(key); err != nil {
		return bucket.Object{}, badKey("get", key, err)
	}
	resp, err := b.reads.NewBlobClient(key).DownloadStream(ctx, nil)
	if err != nil {
		return bucket.Object{}, classify("get", key, bucket.None, err)
	}
	defer resp.Body.Close()
	obj := bucket.Object{Key: key, ETag: etagOf(resp.ETag)}
	size := int64(-1)
	if resp.ContentLength != nil {
		size = *resp.ContentLength
	}
	return bucket.ReadBody(obj, resp.Body, size, max)
}

func (b *azBucket) Head(ctx context.Context, key string) (bucket.Info, error) {
	if err := bucket.ValidateKey(key); err != nil {
		return bucket.Info{}, badKey("head", key, err)
	}
	p, err := b.reads.NewBlobClient(key).GetProperties(ctx, nil)
	if err != nil {
		return bucket.Info{}, classify("head", key, bucket.None, err)
	}
	info := bucket.Info{Key: key, ETag: etagOf(p.ETag)}
	if p.ContentLength != nil {
		info.Size = *p.ContentLength
	}
	if p.LastModified != nil {
		info.LastModified = *p.LastModified
	}
	return info, nil
}

// Put is one Put Blob request carrying If-None-Match: * or If-Match with
// the ETag exactly as the store returned it.
func (b *azBucket) Put(ctx context.Context, key string, body []byte, cond bucket.Condition) (string, error) {
	if err := bucket.ValidateKey(key); err != nil {
		return "", badKey("put", key, err)
	}
	if cond.Kind == bucket.CondIfMatch && cond.ETag == "" {
		return "", errcode.Errorf(errcode.CodeBadRequest, "put %q: if-match with an empty etag", key)
	}
	client, ctx, cancel := b.writeClient(ctx, cond)
	defer cancel()
	resp, err := client.NewBlockBlobClient(key).Upload(ctx, streaming.NopCloser(bytes.NewReader(body)),
		&blockblob.UploadOptions{AccessConditions: access(cond)})
	if err != nil {
		return "", classify("put", key, cond, err)
	}
	return etagOf(resp.ETag), nil
}

// Delete sends If-Match when cond carries one. Unconditional deletes of a
// missing key succeed, as on S3.
func (b *azBucket) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	if err := bucket.ValidateKey(key); err != nil {
		return badKey("delete", key, err)
	}
	switch {
	case cond.Kind == bucket.CondIfAbsent:
		return errcode.Errorf(errcode.CodeBadRequest, "delete %q: if-absent is not a delete condition", key)
	case cond.Kind == bucket.CondIfMatch && cond.ETag == "":
		return errcode.Errorf(errcode.CodeBadRequest, "delete %q: if-match with an empty etag", key)
	}
	client, ctx, cancel := b.writeClient(ctx, cond)
	defer cancel()
	_, err := client.NewBlobClient(key).Delete(ctx, &blob.DeleteOptions{AccessConditions: access(cond)})
	if err != nil {
		oe := classify("delete", key, cond, err)
		if !cond.Conditional() && errors.Is(oe, bucket.ErrNotFound) {
			return nil
		}
		if errors.Is(oe, bucket.ErrPrecondition) {
			return b.missingAfter412(ctx, key, oe)
		}
		return oe
	}
	return nil
}

// missingAfter412 tells a conditional delete's 412 on a missing blob from
// one on a blob with another ETag (QuirkAzureDeleteMissing412): Azure
// answers both with 412 ConditionNotMet, while the contract reports a
// missing key as ErrNotFound. Either way nothing was deleted and the
// version named is not the current one; a read that finds no blob turns
// the answer into ErrNotFound, anything else leaves it a precondition
// failure.
func (b *azBucket) missingAfter412(ctx context.Context, key string, oe *bucket.OpError) error {
	if _, err := b.Head(ctx, key); errors.Is(err, bucket.ErrNotFound) {
		c := *oe
		c.Kind = bucket.ErrNotFound
		return &c
	}
	return oe
}

// afterToken marks a page token that carries a StartAfter bound along
// with Azure's marker: "after:" + base64url(StartAfter) + ":" + marker.
const afterToken = "after:"

// List reads one page with the container's marker as the token. Azure's
// startFrom is inclusive, and Azurite 3.35.0 ignores it
// (QuirkAzureStartFrom), so entries up to and including StartAfter are
// dropped here, on this page and, through the bound carried in the page
// token, on every later one.
func (b *azBucket) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	var marker, prefix, start *string
	var maxResults *int32
	if in.Token != "" {
		tok := in.Token
		if rest, ok := strings.CutPrefix(tok, afterToken); ok {
			enc, m, _ := strings.Cut(rest, ":")
			after, err := base64.RawURLEncoding.DecodeString(enc)
			if err != nil {
				return bucket.ListPage{}, errcode.Errorf(errcode.CodeBadRequest, "list %q: malformed page token", in.Prefix)
			}
			start, tok = new(string(after)), m
		}
		marker = &tok
	} else if in.StartAfter != "" {
		start = &in.StartAfter
	}
	// startFrom is sent only on the first page: later pages follow the marker.
	startFrom := start
	if marker != nil {
		startFrom = nil
	}
	if in.Prefix != "" {
		prefix = &in.Prefix
	}
	if in.MaxKeys > 0 {
		maxResults = new(int32(min(in.MaxKeys, 5000)))
	}
	var (
		items    []*container.BlobItem
		prefixes []*container.BlobPrefix
		next     *string
	)
	if in.Delimiter == "" {
		resp, err := b.reads.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
			Marker: marker, MaxResults: maxResults, Prefix: prefix, StartFrom: startFrom,
		}).NextPage(ctx)
		if err != nil {
			return bucket.ListPage{}, classify("list", in.Prefix, bucket.None, err)
		}
		items, next = resp.Segment.BlobItems, resp.NextMarker
	} else {
		resp, err := b.reads.NewListBlobsHierarchyPager(in.Delimiter, &container.ListBlobsHierarchyOptions{
			Marker: marker, MaxResults: maxResults, Prefix: prefix, StartFrom: startFrom,
		}).NextPage(ctx)
		if err != nil {
			return bucket.ListPage{}, classify("list", in.Prefix, bucket.None, err)
		}
		items, prefixes, next = resp.Segment.BlobItems, resp.Segment.BlobPrefixes, resp.NextMarker
	}
	var page bucket.ListPage
	if next != nil && *next != "" {
		page.NextToken = *next
		if start != nil {
			page.NextToken = afterToken + base64.RawURLEncoding.EncodeToString([]byte(*start)) + ":" + *next
		}
	}
	for _, it := range items {
		if it.Name == nil || (start != nil && *it.Name <= *start) {
			continue
		}
		info := bucket.Info{Key: *it.Name}
		if p := it.Properties; p != nil {
			info.ETag = etagOf(p.ETag)
			if p.ContentLength != nil {
				info.Size = *p.ContentLength
			}
			if p.LastModified != nil {
				info.LastModified = *p.LastModified
			}
		}
		page.Objects = append(page.Objects, info)
	}
	for _, p := range prefixes {
		if p.Name != nil && (start == nil || *p.Name > *start) {
			page.Prefixes = append(page.Prefixes, *p.Name)
		}
	}
	return page, nil
}

var _ bucket.Bucket = (*azBucket)(nil)
