package owner_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// Found in review, fixed: a renewal whose response is lost (it landed) and whose read-back
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

// Found in review, fixed: Claim checks n.Err() only before it starts. A node that fences
// (or closes) while the claim's PUT is in flight still mints the lease
// afterwards and puts it in n.held, which fence's takeHeld already emptied:
// the lease never ends (Done never closes, Err stays nil) although the node
// stopped acting and peers may already call it dead. The daemon's
// AfterEnd/wg accounting for that lease then never completes either.
func TestClaimLandingAfterTheFenceMintsNoLiveLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		a := newNode(t, m.Client("a"), "a")
		if err := a.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer closeNode(a)
		b := openNode(t, m, "b")
		// a can no longer renew: it fences at TTL-margin after its open.
		m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpPut, Key: owner.NodeKey("a"), Fault: fakes3.ErrBefore})
		m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpGet, Key: owner.NodeKey("a"), Fault: fakes3.ErrBefore})
		// a's claim PUT is slow: it lands after a fenced.
		m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpPut, Key: owner.CellKey("c"), Latency: ttl})
		l, err := a.Claim(t.Context(), "c", owner.ClaimOptions{})
		if a.Err() == nil {
			t.Fatal("test setup: a should have fenced during the claim")
		}
		if err != nil {
			return // refusing the claim would be correct
		}
		// b waits until a is dead, then takes the cell over.
		time.Sleep(2 * ttl)
		lb, berr := b.Claim(t.Context(), "c", owner.ClaimOptions{})
		if berr != nil {
			t.Fatalf("b could not take over: %v", berr)
		}
		_ = lb
		if l.Err() == nil {
			t.Fatalf("a fenced (%v) before its claim returned, b took the cell over at epoch %d, yet a's lease of epoch %d is still valid (Done open, held=%v)",
				a.Err(), lb.Epoch(), l.Epoch(), len(a.Held()))
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

// Found in review (the realistic variant of the test above), fixed: one renewal that lands but whose answer is
// slower than RenewTimeout. renew's read-back GET runs on the same, already
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
