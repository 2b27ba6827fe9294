package simulation

import (
	"context"
	"errors"
	"hash/fnv"
	"sync"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/internal/wait"
)

// client is the bucket one node incarnation sees: its own named view of
// the shared fakes3.Mem (so rules and partitions single it out), behind
// what a real S3 client adds — a per-request timeout — and what the
// simulation adds itself:
//
//   - pause: while its node is paused every request waits (or its context
//     ends) before it is sent, as if the process were frozen;
//   - stragglers: a conditional PUT that reports an ambiguous error at once
//     but lands later, after the caller has moved on (a request that was
//     sent and is still travelling when the client gave up on it);
//   - retries (only for the broken variant "client retries"): a client that
//     retries a conditional write after an ambiguous error, as the AWS SDKs
//     do by default and docs/design.md forbids.
type client struct {
	b       bucket.Bucket // the Mem view named after the incarnation
	late    bucket.Bucket // an unfaulted view: the path a straggler travels
	n       *simNode
	name    string
	timeout time.Duration
	retries int

	mu    sync.Mutex
	count map[string]int // PUTs per key, for deterministic straggler draws
}

var errStraggler = errors.New("request still in flight (injected straggler)")

func (c *client) gate(ctx context.Context) error {
	return wait.Sleep(ctx, time.Until(c.n.pausedUntil()))
}

// reply delays the reply to a request already served, while the node's
// replies are slow: the caller learns late what the store did at once. A
// caller that gives up meanwhile gets its context's error (for a
// conditional write: ambiguous, though it applied).
func (c *client) reply(ctx context.Context, op fakes3.Op) error {
	return wait.Sleep(ctx, c.n.slowReply(op))
}

func (c *client) Get(ctx context.Context, key string, max int64) (bucket.Object, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := c.gate(ctx); err != nil {
		return bucket.Object{}, bucket.Classify("get", key, bucket.None, 0, "", err)
	}
	obj, err := c.b.Get(ctx, key, max)
	if rerr := c.reply(ctx, fakes3.OpGet); rerr != nil {
		return bucket.Object{}, bucket.Classify("get", key, bucket.None, 0, "", rerr)
	}
	return obj, err
}

func (c *client) Head(ctx context.Context, key string) (bucket.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := c.gate(ctx); err != nil {
		return bucket.Info{}, bucket.Classify("head", key, bucket.None, 0, "", err)
	}
	info, err := c.b.Head(ctx, key)
	if rerr := c.reply(ctx, fakes3.OpHead); rerr != nil {
		return bucket.Info{}, bucket.Classify("head", key, bucket.None, 0, "", rerr)
	}
	return info, err
}

func (c *client) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := c.gate(ctx); err != nil {
		return bucket.Classify("delete", key, cond, 0, "", err)
	}
	err := c.b.Delete(ctx, key, cond)
	if rerr := c.reply(ctx, fakes3.OpDelete); rerr != nil {
		return bucket.Classify("delete", key, cond, 0, "", rerr)
	}
	return err
}

func (c *client) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := c.gate(ctx); err != nil {
		return bucket.ListPage{}, bucket.Classify("list", in.Prefix, bucket.None, 0, "", err)
	}
	page, err := c.b.List(ctx, in)
	if rerr := c.reply(ctx, fakes3.OpList); rerr != nil {
		return bucket.ListPage{}, bucket.Classify("list", in.Prefix, bucket.None, 0, "", rerr)
	}
	return page, err
}

func (c *client) Put(ctx context.Context, key string, body []byte, cond bucket.Condition) (string, error) {
	if err := c.gate(ctx); err != nil {
		return "", bucket.Classify("put", key, cond, 0, "", err)
	}
	if cond.Conditional() {
		if d, ok := c.straggle(key); ok {
			// The request is on its way and will land after d; the caller
			// hears nothing definite. It travels on an unfaulted view: it
			// left before any partition or crash that follows.
			body := append([]byte(nil), body...)
			c.n.w.bg.Go(func() {
				time.Sleep(d)
				_, _ = c.late.Put(context.Background(), key, body, cond)
			})
			return "", bucket.Classify("put", key, cond, 0, "", errStraggler)
		}
	}
	for i := 0; ; i++ {
		pctx, cancel := context.WithTimeout(ctx, c.timeout)
		etag, err := c.b.Put(pctx, key, body, cond)
		if rerr := c.reply(pctx, fakes3.OpPut); rerr != nil {
			etag, err = "", bucket.Classify("put", key, cond, 0, "", rerr)
		}
		cancel()
		if i < c.retries && cond.Conditional() && errors.Is(err, bucket.ErrAmbiguous) && ctx.Err() == nil {
			continue // the broken client: send the same conditional write again
		}
		return etag, err
	}
}

// straggle decides, as a pure function of the seed, the client, the key
// and how many PUTs of that key this client sent, whether this PUT lands
// late, and how late.
func (c *client) straggle(key string) (time.Duration, bool) {
	pct, until := c.n.straggling()
	if pct == 0 || !time.Now().Before(until) {
		return 0, false
	}
	c.mu.Lock()
	c.count[key]++
	k := c.count[key]
	c.mu.Unlock()
	h := draw(c.n.w.seed, "straggle", c.name, key, k)
	if int(h%100) >= pct {
		return 0, false
	}
	return time.Duration(100+(h>>8)%uint64(2*c.n.w.cfg.ttl/time.Millisecond)) * time.Millisecond, true
}

// draw hashes its inputs into a pseudo-random number: fault decisions that
// depend on what was asked, not on which goroutine asked first.
func draw(seed uint64, parts ...any) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(seed >> (8 * i))
	}
	h.Write(b[:])
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			h.Write([]byte(v))
		case int:
			for i := range b {
				b[i] = byte(uint64(v) >> (8 * i))
			}
			h.Write(b[:])
		}
		h.Write([]byte{0})
	}
	x := h.Sum64()
	// splitmix64 finaliser: FNV's low bits are weak.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
