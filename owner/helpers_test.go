package owner_test

import (
	"context"
	"encoding/json"
	"time"

	"github.com/deedkit/deed/bucket"
)

func jsonMarshalImpl(v any) ([]byte, error) { return json.Marshal(v) }

// withTimeout bounds every request to b, like the S3 client's per-request
// timeout for conditional writes.
func withTimeout(b bucket.Bucket, d time.Duration) bucket.Bucket { return timeoutBucket{b, d} }

type timeoutBucket struct {
	b bucket.Bucket
	d time.Duration
}

func (t timeoutBucket) Get(ctx context.Context, k string, max int64) (bucket.Object, error) {
	ctx, c := context.WithTimeout(ctx, t.d)
	defer c()
	return t.b.Get(ctx, k, max)
}
func (t timeoutBucket) Head(ctx context.Context, k string) (bucket.Info, error) {
	ctx, c := context.WithTimeout(ctx, t.d)
	defer c()
	return t.b.Head(ctx, k)
}
func (t timeoutBucket) Put(ctx context.Context, k string, body []byte, cond bucket.Condition) (string, error) {
	ctx, c := context.WithTimeout(ctx, t.d)
	defer c()
	return t.b.Put(ctx, k, body, cond)
}
func (t timeoutBucket) Delete(ctx context.Context, k string, cond bucket.Condition) error {
	ctx, c := context.WithTimeout(ctx, t.d)
	defer c()
	return t.b.Delete(ctx, k, cond)
}
func (t timeoutBucket) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	ctx, c := context.WithTimeout(ctx, t.d)
	defer c()
	return t.b.List(ctx, in)
}
