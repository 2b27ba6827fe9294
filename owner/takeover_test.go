package owner_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// Taking a cell over from a node judged dead: the judgment never comes
// before that node has fenced itself. Several of these pin bugs the
// simulation (replication/simulation) found; its seeds are kept there too
// (TestRegressions).

// A claimer used to trust a cached view of the owner's node lease (from a
// Refresh less than TTL/3 old) to call the owner dead. But the view can
// predate the record being judged: the owner's node restarted since that
// Refresh, re-acquired its lease and claimed the cell, and the claimer,
// reading the new record, took the cell over from a live node as
// "owner-dead" — before that node had fenced itself. A view that says dead
// must be read again. (Found by seeds 4714 and 4974.)
func TestStaleViewOfRestartedOwnerIsReadAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		b := openNode(t, m, "b")
		a1 := newNode(t, m.Client("a1"), "a")
		if err := a1.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := a1.Close(t.Context()); err != nil { // a clean stop: its node lease says released
			t.Fatal(err)
		}
		// b's periodic Refresh (after its renewal) sees a released.
		time.Sleep(ttl / 3)
		synctest.Wait()
		if b.Observer().Alive("a") {
			t.Fatal("b should have seen a's lease released")
		}
		// a restarts at once and claims the cell before b refreshes again.
		a2 := newNode(t, m.Client("a2"), "a")
		if err := a2.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer closeNode(a2)
		la, err := a2.Claim(t.Context(), "c", owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.Claim(t.Context(), "c", owner.ClaimOptions{})
		mustCode(t, err, errcode.CodeHeld)
		if la.Err() != nil {
			t.Fatalf("a's lease ended: %v", la.Err())
		}
	})
}

// An observer used to stamp the first sight of a lease version with the
// time it sent the GET, not the time the answer came back. A slow GET can
// return a renewal that was sent after the GET: the observation then began
// before the renewal it shows, and the node was called dead up to that
// GET's latency too early — before it had fenced itself. (Found by
// reasoning about the simulation's slow-request faults, not by a seed.)
func TestFirstSightIsStampedWhenTheAnswerArrives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		var fencedAt atomic.Int64
		a, _ := owner.NewNode(m.Client("a"), owner.Config{Name: "a", TTL: ttl, Margin: margin,
			Hooks: owner.Hooks{Fence: func(string) { fencedAt.Store(time.Now().UnixNano()) }}})
		if err := a.Open(t.Context()); err != nil { // renews at TTL/3, 2TTL/3, …
			t.Fatal(err)
		}
		defer closeNode(a)
		start := time.Now()
		// The observer's first GET takes half a TTL; a renews meanwhile.
		m.Inject(fakes3.Rule{Client: "e", Op: fakes3.OpGet, Latency: ttl / 2, Times: 1})
		obs := owner.NewObserver(m.Client("e"), a.Params())
		time.Sleep(ttl / 6)
		if _, err := obs.Observe(t.Context(), "a"); err != nil {
			t.Fatal(err)
		}
		// From now on a cannot renew: it fences TTL−margin after its last
		// good renewal, the one the slow GET returned.
		m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpPut, Fault: fakes3.ErrBefore})
		for {
			ob, err := obs.Observe(t.Context(), "a")
			if err != nil {
				t.Fatal(err)
			}
			if !owner.Alive(ob, time.Now(), a.Params()) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		deadAt := time.Since(start)
		if f := fencedAt.Load(); f == 0 || time.Unix(0, f).Sub(start) >= deadAt {
			t.Fatalf("a was called dead %v after the start, before it fenced itself", deadAt)
		}
	})
}

// slowReplies delays the answers to GETs of one key after the store has
// served them: the answer describes the store as it was when it was sent.
type slowReplies struct {
	bucket.Bucket
	key   string
	delay atomic.Int64
}

func (s *slowReplies) Get(ctx context.Context, key string, max int64) (bucket.Object, error) {
	obj, err := s.Bucket.Get(ctx, key, max)
	if key == s.key {
		time.Sleep(time.Duration(s.delay.Load()))
	}
	return obj, err
}

// A claimer used to judge the owner's liveness at the time the answer to
// its GET of the owner's lease came back, not at the time the GET was
// sent. A slow answer describes the lease as it was when it was served;
// the owner may have renewed since. Judged at the later time, a version
// that was current a moment ago looked unchanged for longer than it was,
// and a live node that had just renewed was called dead. (Found by
// reasoning about the simulation's slow-reply faults, not by a seed.)
func TestLivenessIsJudgedWhenTheReadWasSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		a := openNode(t, m, "a") // renews at TTL/3, 2TTL/3, …
		la, err := a.Claim(t.Context(), "c", owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		sb := &slowReplies{Bucket: m.Client("b"), key: owner.NodeKey("a")}
		b := newNode(t, sb, "b") // never opened: it observes only when it claims
		time.Sleep(ttl/3 + ttl/30)
		if _, err := b.Observer().Observe(t.Context(), "a"); err != nil { // first sight of a's renewal at TTL/3
			t.Fatal(err)
		}
		// a's renewals fail until just before its fence deadline; the one
		// after succeeds in time, so a never fences.
		m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpPut, Fault: fakes3.ErrBefore,
			Match: func(fakes3.Op, string) bool { return time.Since(start) < ttl/3+ttl-margin-ttl/10 }})
		time.Sleep(ttl - margin - ttl/10 - ttl/30 - ttl/60)
		// b reads a's lease just before that renewal; the answer arrives
		// after TTL+margin since b first saw the version it shows.
		sb.delay.Store(int64(ttl / 2))
		_, err = b.Claim(t.Context(), "c", owner.ClaimOptions{})
		if err == nil {
			t.Fatalf("a live node was called dead (a fenced: %v)", a.Err())
		}
		mustCode(t, err, errcode.CodeHeld)
		if a.Err() != nil || la.Err() != nil {
			t.Fatalf("a fenced itself: %v", a.Err())
		}
	})
}

// A release whose PUT failed used to read the record a second time to tell
// "did not land" from "someone took over", and took a failure of that read
// for a takeover: the lease ended as superseded (DEED-E021) while the
// record still named this node, so no peer could claim the cell while the
// node lived, and the node itself believed it had lost it. The read-back
// that settles the PUT already tells the two apart. (Found by seed
// 1007280.)
func TestReleaseReadFailureIsNotATakeover(t *testing.T) {
	m := fakes3.NewMem()
	a := newNode(t, m.Client("a"), "a")
	l, err := a.Claim(t.Context(), "c", owner.ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := owner.CellKey("c")
	m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpPut, Key: key, Fault: fakes3.ErrBefore, Times: 1})
	m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpGet, Key: key, Fault: fakes3.SlowDown, Skip: 1, Times: 1})
	err = l.Release(t.Context())
	if err == nil || errcode.CodeOf(err) == errcode.CodeSuperseded {
		t.Fatalf("release that did not land: got %v, want a retryable error", err)
	}
	if l.Err() != nil {
		t.Fatalf("the lease ended although the record is still its own: %v", l.Err())
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatalf("retried release: %v", err)
	}
	if r := record(t, m, "c"); !r.Released() {
		t.Fatalf("record %+v", r)
	}
}

// The takeover of a long-dead node's cell needs no read of its lease when
// the record names the incarnation that wrote it and the claimer's view
// already proves that incarnation dead: one GET of own.json and one PUT,
// as for a released cell. The same view must not be enough for a record
// written by a later incarnation (TestStaleViewOfRestartedOwnerIsReadAgain).
func TestProvenDeadIncarnationIsTakenOverWithoutReadingItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		a := openNode(t, m, "a")
		if _, err := a.Claim(t.Context(), "c", owner.ClaimOptions{}); err != nil {
			t.Fatal(err)
		}
		b := openNode(t, m, "b")
		m.Partition("a", true) // a is cut off: it fences, its lease stays as it was
		time.Sleep(ttl + margin + ttl/3 + ttl/30)
		synctest.Wait()
		if a.Err() == nil {
			t.Fatal("a should have fenced itself")
		}
		var leaseReads atomic.Int64
		m.Inject(fakes3.Rule{Client: "b", Match: func(op fakes3.Op, key string) bool {
			if key == owner.NodeKey("a") {
				leaseReads.Add(1)
			}
			return false
		}})
		l, err := b.Claim(t.Context(), "c", owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Epoch() != 2 {
			t.Fatalf("epoch %d, want 2", l.Epoch())
		}
		if n := leaseReads.Load(); n != 0 {
			t.Fatalf("the takeover read a's lease %d times; b's view already proved a's incarnation dead", n)
		}
	})
}

func (d *deafPut) Put(ctx context.Context, key string, body []byte, c bucket.Condition) (string, error) {
	time.Sleep(time.Duration(d.delay.Load()))
	return d.Bucket.Put(context.WithoutCancel(ctx), key, body, c)
}
