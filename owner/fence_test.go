package owner_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// How a node stops acting: fencing itself, and Close.

// Close used to end the leases it could not release while holding the
// node's lock, and ending a lease takes that lock again: Close hung for
// ever whenever a release failed. (Found by seed 408.)
func TestCloseWithUnreleasableLeaseDoesNotHang(t *testing.T) {
	m := fakes3.NewMem()
	a := newNode(t, m.Client("a"), "a")
	if err := a.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	l, err := a.Claim(t.Context(), "c", owner.ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The release's PUT fails before it applies: the record is still ours,
	// so the lease stays valid and Close must end it itself.
	m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpPut, Key: owner.CellKey("c"), Fault: fakes3.ErrBefore})
	done := make(chan error, 1)
	go func() { done <- a.Close(t.Context()) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Close reported no error for a release that failed")
		}
	case <-time.After(time.Minute): // a watchdog only: Close needs no time
		t.Fatal("Close hung")
	}
	mustCode(t, l.Err(), errcode.CodeNodeFenced)
	if _, held := a.Lease("c"); held {
		t.Fatal("the closed node still holds the lease")
	}
}

// Close used to stop renewing the node lease first and end the leases it
// could not release last, after releasing the node lease. With a slow
// store in between, the node kept its leases after its lease had gone
// stale, and a peer took its cells over as owner-dead before it had
// stopped acting. (Found by seed 1007280.)
func TestCloseStopsActingBeforeItStopsRenewing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		a := newNode(t, m.Client("a"), "a")
		if err := a.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		l, err := a.Claim(t.Context(), "c", owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		obs := owner.NewObserver(m.Client("b"), a.Params())
		if err := obs.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
		// The cell's release fails; the node lease's release hangs.
		m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpPut, Key: owner.CellKey("c"), Fault: fakes3.ErrBefore})
		m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpPut, Key: owner.NodeKey("a"), Latency: 2 * ttl})
		done := make(chan struct{})
		go func() { defer close(done); _ = a.Close(t.Context()) }()
		for obs.Alive("a") {
			time.Sleep(10 * time.Millisecond)
			if err := obs.Refresh(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if l.Err() == nil {
			t.Fatal("a peer may call a dead while its lease is still valid")
		}
		mustCode(t, l.Err(), errcode.CodeNodeFenced)
		<-done
	})
}

// deafPut answers PUTs only after delay, whatever the context says: a
// store that ignores the client's deadline, or a process too slow to read
// the answer in time.
type deafPut struct {
	bucket.Bucket
	delay atomic.Int64
}

// Fence reasons tell operators what happened: "unreachable" when renewal
// attempts failed (the store or the network), "expired" when none failed
// but none succeeded in time either (a paused or starved process, or an
// answer that came too late).
func TestFenceReasonsAreDistinct(t *testing.T) {
	fenceReason := func(t *testing.T, b bucket.Bucket, after func()) string {
		var reason atomic.Value
		n, err := owner.NewNode(b, owner.Config{Name: "a", TTL: ttl, Margin: margin,
			Hooks: owner.Hooks{Fence: func(r string) { reason.Store(r) }}})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer closeNode(n)
		after()
		time.Sleep(2 * ttl)
		r, _ := reason.Load().(string)
		return r
	}
	t.Run("unreachable", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := fakes3.NewMem()
			got := fenceReason(t, m.Client("a"), func() { m.Partition("a", true) })
			if got != "unreachable" {
				t.Fatalf("reason %q, want unreachable", got)
			}
		})
	})
	t.Run("expired", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := fakes3.NewMem()
			d := &deafPut{Bucket: m}
			got := fenceReason(t, d, func() { d.delay.Store(int64(ttl)) })
			if got != "expired" {
				t.Fatalf("reason %q, want expired", got)
			}
		})
	})
}

// Claim used to check n.Err() only before it started. A node that fenced
// (or closed) while the claim's PUT was in flight still minted the lease
// afterwards and put it in n.held, which fence's takeHeld had already
// emptied: the lease never ended (Done never closed, Err stayed nil) although the node
// had stopped acting and peers could already call it dead. The daemon's
// AfterEnd/wg accounting for that lease then never completed either.
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
