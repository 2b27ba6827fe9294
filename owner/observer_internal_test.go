package owner

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
)

// jitterBucket delays each request on its way to the store and its answer
// on the way back by up to rtt/2 each, at random, and notes the send time
// of every write of the watched key by the ETag it produced.
type jitterBucket struct {
	bucket.Bucket
	rtt   time.Duration
	watch string

	mu   sync.Mutex
	rng  *rand.Rand
	sent map[string]time.Time // ETag → send time of the PUT that wrote it
}

func (j *jitterBucket) pause() {
	j.mu.Lock()
	d := time.Duration(j.rng.Int64N(int64(j.rtt/2) + 1))
	j.mu.Unlock()
	time.Sleep(d)
}

func (j *jitterBucket) Get(ctx context.Context, k string, max int64) (bucket.Object, error) {
	j.pause()
	o, err := j.Bucket.Get(ctx, k, max)
	j.pause()
	return o, err
}

func (j *jitterBucket) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	j.pause()
	p, err := j.Bucket.List(ctx, in)
	j.pause()
	return p, err
}

func (j *jitterBucket) Put(ctx context.Context, k string, body []byte, c bucket.Condition) (string, error) {
	sent := time.Now()
	j.pause()
	etag, err := j.Bucket.Put(ctx, k, body, c)
	if err == nil && k == j.watch {
		j.mu.Lock()
		j.sent[etag] = sent
		j.mu.Unlock()
	}
	j.pause()
	return etag, err
}

// A peer's node-lease versions are first seen by an observer within the
// LIST's offset into the aligned renewal interval and a round trip of their
// write, the last one before the
// peer died included, and never before the renewal that wrote it was sent
// (the rule that makes every node fence itself before a peer may call it
// dead). Requests and answers travel with random delays.
func TestWatchSeesRenewalsPromptlyAndNeverEarly(t *testing.T) {
	const ttl, rtt = 2 * time.Second, 40 * time.Millisecond
	for seed := range uint64(20) {
		synctest.Test(t, func(t *testing.T) {
			ctx := t.Context()
			m := fakes3.NewMem()
			ja := &jitterBucket{Bucket: m.Client("a"), rtt: rtt, watch: NodeKey("a"), rng: rand.New(rand.NewPCG(seed, 1)), sent: map[string]time.Time{}}
			jb := &jitterBucket{Bucket: m.Client("b"), rtt: rtt, rng: rand.New(rand.NewPCG(seed, 2)), sent: map[string]time.Time{}}
			a, err := NewNode(ja, Config{Name: "a", TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Open(ctx); err != nil {
				t.Fatal(err)
			}
			defer a.Close(ctx)
			time.Sleep(time.Duration(rand.New(rand.NewPCG(seed, 3)).Int64N(int64(ttl / 3))))
			b, err := NewNode(jb, Config{Name: "b", TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Open(ctx); err != nil {
				t.Fatal(err)
			}
			defer b.Close(ctx)
			step := listOffset(ttl / 3)
			// Sample b's view of a every millisecond for four renewals,
			// then cut a off, and go on until b has proven it dead.
			kill := time.Now().Add(4 * ttl / 3)
			worst := time.Duration(0)
			var lastETag string
			for i := 0; ; i++ {
				if time.Now().After(kill) {
					m.Partition("a", true)
				}
				b.obs.mu.Lock()
				ob := b.obs.obs["a"]
				b.obs.mu.Unlock()
				ja.mu.Lock()
				sent, ok := ja.sent[ob.ETag]
				ja.mu.Unlock()
				if ok && ob.FirstSeen.Before(sent) {
					t.Fatalf("seed %d: version %s first seen at %v, before the renewal that wrote it was sent (%v)", seed, ob.ETag, ob.FirstSeen, sent)
				}
				if ok && ob.ETag != lastETag {
					lastETag = ob.ETag
					// The first version b saw was its first look: not timed.
					if lag := ob.FirstSeen.Sub(sent); i > 0 && lag > worst {
						worst = lag
					}
				}
				if provenDead(ob, b.obs.p) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if worst > step+2*rtt {
				t.Errorf("seed %d: a renewal was first seen %v after it was sent; want within the LIST's offset (%v) and a round trip", seed, worst, step)
			}
		})
	}
}
