package owner_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// Renewal of the node lease: it survives lost answers, slow peers and brief
// outages, and never outlives the fence deadline.

// A renewal whose response is lost (it landed) and whose read-back
// GET also fails is reported "error"; the retry sends If-Match with the
// ETag before the landed write, gets 412, finds the lease present and fences
// the node as "replaced" — although nobody but this node wrote its lease and
// the store answered every later request. One lost response plus one failed
// GET fences a healthy node.
func TestLostRenewalResponseDoesNotFenceAsReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		var reason atomic.Value
		a, err := owner.NewNode(m.Client("a"), owner.Config{Name: "a", TTL: ttl, Margin: margin,
			Hooks: owner.Hooks{Fence: func(r string) { reason.Store(r) }}})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer closeNode(a)
		// The next renewal lands but its answer is lost (500 after apply);
		// the read-back GET of the lease fails once (500 before apply).
		m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpPut, Key: owner.NodeKey("a"), Fault: fakes3.ErrAfter, Times: 1})
		m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpGet, Key: owner.NodeKey("a"), Fault: fakes3.ErrBefore, Times: 1})
		time.Sleep(2 * ttl)
		synctest.Wait()
		if err := a.Err(); err != nil {
			t.Fatalf("node fenced (reason %v) after a single lost renewal response and one failed read-back: %v", reason.Load(), err)
		}
	})
}

// slowAnswer applies the first PUT of key, then withholds the answer until
// the caller's context ends: a write that landed but timed out.
type slowAnswer struct {
	bucket.Bucket
	key  string
	once atomic.Bool
}

func (s *slowAnswer) Put(ctx context.Context, key string, body []byte, cond bucket.Condition) (string, error) {
	if key != s.key || !s.once.CompareAndSwap(false, true) {
		return s.Bucket.Put(ctx, key, body, cond)
	}
	if _, err := s.Bucket.Put(context.WithoutCancel(ctx), key, body, cond); err != nil {
		return "", err
	}
	<-ctx.Done()
	return "", bucket.Classify("put", key, cond, 0, "", ctx.Err())
}

// The realistic variant of the test above: one renewal that lands but whose
// answer is slower than RenewTimeout. renew's read-back GET runs on the same, already
// expired, context, so it always fails; the retry then gets 412 on its own
// landed write and the node fences as "replaced" with a healthy store.
func TestTimedOutRenewalThatLandedDoesNotFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		var reason atomic.Value
		b := &slowAnswer{Bucket: m.Client("a"), key: owner.NodeKey("a")}
		b.once.Store(true) // let the acquire through
		a, err := owner.NewNode(b, owner.Config{Name: "a", TTL: ttl, Margin: margin,
			Hooks: owner.Hooks{Fence: func(r string) { reason.Store(r) }}})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer closeNode(a)
		b.once.Store(false) // the next renewal lands but answers too late
		time.Sleep(2 * ttl)
		synctest.Wait()
		if err := a.Err(); err != nil {
			t.Fatalf("node fenced (reason %v) after one renewal that landed but answered late: %v", reason.Load(), err)
		}
	})
}

// The renewal loop used to refresh its view of the peers inline, without a
// bound: a store slow to answer this node's GETs (a brownout) held the
// loop in Refresh past the next renewal and past the fence deadline, which
// is only checked between iterations. Peers called the node dead while it
// still held its leases, and it fenced itself only when Refresh returned.
// Observing peers must never hold up renewing. (Found by seed 5402.)
func TestSlowPeerObservationDoesNotStallRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		var fenced atomic.Bool
		a, _ := owner.NewNode(m.Client("a"), owner.Config{Name: "a", TTL: ttl, Margin: margin,
			Hooks: owner.Hooks{Fence: func(string) { fenced.Store(true) }}})
		if err := a.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer closeNode(a)
		// Three peers renew every TTL/3, so each Refresh of a's must GET
		// three changed leases — each taking half a TTL to answer.
		for _, p := range []string{"b", "c", "d"} {
			openNode(t, m, p)
		}
		m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpGet, Latency: ttl / 2})
		obs := owner.NewObserver(m.Client("e"), a.Params())
		for range 4 * ttl / (10 * time.Millisecond) {
			if err := obs.Refresh(t.Context()); err != nil {
				t.Fatal(err)
			}
			if !obs.Alive("a") {
				t.Fatalf("a was called dead (fenced itself first: %v) although every renewal it sent would have succeeded", fenced.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if fenced.Load() || a.Err() != nil {
			t.Fatalf("a fenced itself: %v", a.Err())
		}
	})
}

// A renewal attempt used to be bounded by a floor (50 ms, or TTL/50) even
// when less time than that was left before the fence deadline: with a
// short TTL the node went on acting while the attempt hung past its
// deadline — past the earliest moment a peer may call it dead when
// 2×margin is below that floor (TTL < 250 ms). An attempt now never
// outlives the deadline. (Found by reasoning, noted as a leftover in the
// simulation's first report.)
func TestRenewalInFlightNeverOutlivesTheFenceDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl, margin = time.Second, 10 * time.Millisecond // the least TTL (owner.MinTTL), with a margin far below the floor
		m := fakes3.NewMem()
		var fencedAt atomic.Int64
		a, err := owner.NewNode(m.Client("a"), owner.Config{Name: "a", TTL: ttl, Margin: margin,
			Hooks: owner.Hooks{Fence: func(string) { fencedAt.Store(time.Now().UnixNano()) }}})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now() // the node lease is created now: the deadline is start+TTL−margin
		if err := a.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer closeNode(a)
		// Every renewal hangs: the store has stopped answering this node.
		m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpPut, Latency: time.Hour})
		time.Sleep(2 * ttl)
		f := fencedAt.Load()
		if f == 0 {
			t.Fatal("a never fenced")
		}
		deadline := start.Add(ttl - margin)
		if at := time.Unix(0, f); at.After(deadline) {
			t.Fatalf("a fenced %v after its deadline (earliest death verdict: %v after it)", at.Sub(deadline), 2*margin)
		}
	})
}

func TestRenewedLeaseOutlivesOriginalDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		var renewals int
		var mu sync.Mutex
		a, err := owner.NewNode(m, owner.Config{Name: "a", TTL: ttl, Margin: margin, Hooks: owner.Hooks{Renew: func(r string) {
			mu.Lock()
			if r == "ok" {
				renewals++
			}
			mu.Unlock()
		}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer closeNode(a)
		l, _ := a.Claim(t.Context(), "c", owner.ClaimOptions{})
		obs := owner.NewObserver(m, a.Params())
		for i := 0; i < 10; i++ {
			time.Sleep(ttl)
			if err := obs.Refresh(t.Context()); err != nil {
				t.Fatal(err)
			}
			if !obs.Alive("a") || a.Err() != nil || l.Err() != nil {
				t.Fatalf("after %d TTLs: alive=%v node=%v lease=%v", i+1, obs.Alive("a"), a.Err(), l.Err())
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if renewals < 28 {
			t.Fatalf("%d renewals in 10 TTLs, want ~30 (every TTL/3)", renewals)
		}
	})
}

func TestRenewalRetriesThroughBriefOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		a := openNode(t, m, "a")
		time.Sleep(ttl / 2)
		// Two failed renewals in a row, then the store recovers.
		m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpPut, Fault: fakes3.SlowDown, Times: 2})
		time.Sleep(3 * ttl)
		if a.Err() != nil {
			t.Fatalf("a brief outage fenced the node: %v", a.Err())
		}
	})
}
