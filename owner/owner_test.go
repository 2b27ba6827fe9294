package owner_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

const (
	ttl    = 3 * time.Second
	margin = 300 * time.Millisecond
)

func newNode(t *testing.T, b bucket.Bucket, name string) *owner.Node {
	t.Helper()
	n, err := owner.NewNode(b, owner.Config{Name: name, Addr: name + ":7480", TTL: ttl, Margin: margin})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func openNode(t *testing.T, m *fakes3.Mem, name string) *owner.Node {
	t.Helper()
	n := newNode(t, m.Client(name), name)
	if err := n.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeNode(n) })
	return n
}

func mustCode(t *testing.T, err error, code errcode.Code) {
	t.Helper()
	if errcode.CodeOf(err) != code || !strings.HasPrefix(err.Error(), string(code)) {
		t.Fatalf("got %v, want an error starting with %s", err, code)
	}
}

func record(t *testing.T, m *fakes3.Mem, cell string) owner.Record {
	t.Helper()
	body, ok := m.Bytes(owner.CellKey(cell))
	if !ok {
		t.Fatalf("no record for %s", cell)
	}
	r, err := owner.ParseRecord(cell, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestOneHolderAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		a, b := openNode(t, m, "a"), openNode(t, m, "b")
		la, err := a.Claim(t.Context(), "c1", owner.ClaimOptions{})
		if err != nil || la.Epoch() != 1 || la.Cell() != "c1" || la.Node() != "a" {
			t.Fatalf("claim: %v %+v", err, la)
		}
		_, err = b.Claim(t.Context(), "c1", owner.ClaimOptions{})
		mustCode(t, err, errcode.CodeHeld)
		var held *owner.HeldError
		if !errors.As(err, &held) || held.Owner != "a" || held.Addr != "a:7480" || held.Epoch != 1 {
			t.Fatalf("held error must name the owner and its address: %#v", held)
		}
		// Still held after several TTLs: a keeps renewing.
		time.Sleep(4 * ttl)
		_, err = b.Claim(t.Context(), "c1", owner.ClaimOptions{})
		mustCode(t, err, errcode.CodeHeld)
		if la.Err() != nil {
			t.Fatalf("holder lost its lease: %v", la.Err())
		}
	})
}

func TestReentryBumpsEpochAndFencesPreviousIncarnation(t *testing.T) {
	m := fakes3.NewMem()
	first := newNode(t, m, "a")
	l1, err := first.Claim(t.Context(), "c", owner.ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restarted := newNode(t, m, "a") // same node id, new process
	l2, err := restarted.Claim(t.Context(), "c", owner.ClaimOptions{})
	if err != nil || l2.Epoch() != 2 {
		t.Fatalf("re-entry: %v epoch %d, want epoch 2", err, l2.Epoch())
	}
	mustCode(t, l1.Release(t.Context()), errcode.CodeSuperseded)
	mustCode(t, l1.Err(), errcode.CodeSuperseded)
	select {
	case <-l1.Done():
	default:
		t.Fatal("superseded lease's Done is open")
	}
	if r := record(t, m, "c"); r.Node != "a" || r.Epoch != 2 {
		t.Fatalf("record after re-entry %+v", r)
	}
	// Re-entry within one Node supersedes its own older lease locally.
	l3, err := restarted.Claim(t.Context(), "c", owner.ClaimOptions{})
	if err != nil || l3.Epoch() != 3 {
		t.Fatal(err)
	}
	mustCode(t, l2.Err(), errcode.CodeSuperseded)
	if got, _ := restarted.Lease("c"); got != l3 {
		t.Fatal("node does not track the newest lease")
	}
}

func TestDeadNodeCellIsTakenOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		a, b := openNode(t, m, "a"), openNode(t, m, "b")
		la, err := a.Claim(t.Context(), "c", owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m.Partition("a", true) // a is cut off: it can no longer renew
		start := time.Now()
		var lb *owner.Lease
		for lb == nil {
			lb, err = b.Claim(t.Context(), "c", owner.ClaimOptions{})
			if err != nil {
				mustCode(t, err, errcode.CodeHeld)
				time.Sleep(100 * time.Millisecond)
			}
		}
		took := time.Since(start)
		if took < ttl || took > ttl+margin+ttl/3+time.Second {
			t.Fatalf("takeover after %v; want between TTL and TTL+margin+one refresh", took)
		}
		if lb.Epoch() != 2 {
			t.Fatalf("epoch %d", lb.Epoch())
		}
		<-la.Done()
		mustCode(t, la.Err(), errcode.CodeNodeFenced)
		mustCode(t, a.Err(), errcode.CodeNodeFenced)
		m.Partition("a", false)
	})
}

func TestStalledHolderCannotAct(t *testing.T) {
	m := fakes3.NewMem()
	a, b := newNode(t, m, "a"), newNode(t, m, "b")
	la, err := a.Claim(t.Context(), "c", owner.ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// a stalls; an operator forces b in.
	if _, err := b.Claim(t.Context(), "c", owner.ClaimOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	err = la.Release(t.Context())
	mustCode(t, err, errcode.CodeSuperseded)
	if r := record(t, m, "c"); r.Node != "b" || r.Epoch != 2 {
		t.Fatalf("stale holder's release changed the record: %+v", r)
	}
}

func TestReleaseLetsNextClaimerInAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		a, b := openNode(t, m, "a"), openNode(t, m, "b")
		la, _ := a.Claim(t.Context(), "c", owner.ClaimOptions{})
		if err := la.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		mustCode(t, la.Err(), errcode.CodeReleased)
		mustCode(t, la.Release(t.Context()), errcode.CodeReleased)
		start := time.Now()
		lb, err := b.Claim(t.Context(), "c", owner.ClaimOptions{})
		if err != nil || lb.Epoch() != 2 || time.Since(start) != 0 {
			t.Fatalf("claim after release: %v, epoch %d, waited %v", err, lb.Epoch(), time.Since(start))
		}
	})
}

func TestZeroLeaseIsInvalid(t *testing.T) {
	var zero owner.Lease
	mustCode(t, zero.Err(), errcode.CodeInvalidLease)
	mustCode(t, zero.Release(t.Context()), errcode.CodeInvalidLease)
	var nilLease *owner.Lease
	mustCode(t, nilLease.Check(), errcode.CodeInvalidLease)
	select {
	case <-zero.Done():
	default:
		t.Fatal("zero lease's Done must be closed")
	}
}

// An observer whose wall clock is hours off still waits TTL+margin of its
// own time before calling a silent node dead: it never reads at_ms.
func TestObserverIgnoresWallClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		for _, skew := range []time.Duration{-5 * time.Hour, 0, 7 * time.Hour} {
			node := fmt.Sprintf("n%d", int(skew.Hours())+10)
			rec := owner.NodeRecord{Node: node, Incarnation: "x", TTLMS: ttl.Milliseconds(), Seq: 1, AtMS: time.Now().Add(skew).UnixMilli()}
			body, _ := jsonMarshal(rec)
			m.Set(owner.NodeKey(node), body)
		}
		obs := owner.NewObserver(m, owner.Params{TTL: ttl, Margin: margin})
		if err := obs.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl + margin)
		obs.Refresh(t.Context())
		for _, v := range obs.View() {
			if !v.Alive {
				t.Fatalf("%s called dead at exactly TTL+margin", v.Node)
			}
		}
		time.Sleep(time.Millisecond)
		obs.Refresh(t.Context())
		for _, v := range obs.View() {
			if v.Alive {
				t.Fatalf("%s still alive after TTL+margin unchanged", v.Node)
			}
		}
	})
}

// A node whose renewals stall fences itself strictly before any observer
// may call it dead — under every stall pattern tried.
func TestFenceStrictlyBeforeDeath(t *testing.T) {
	for _, stall := range []fakes3.Fault{fakes3.Drop, fakes3.ErrBefore, fakes3.SlowDown} {
		t.Run(stall.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := fakes3.NewMem()
				var mu sync.Mutex
				var fencedAt time.Time
				a, _ := owner.NewNode(m.Client("a"), owner.Config{Name: "a", TTL: ttl, Margin: margin,
					Hooks: owner.Hooks{Fence: func(string) { mu.Lock(); fencedAt = time.Now(); mu.Unlock() }}})
				if err := a.Open(t.Context()); err != nil {
					t.Fatal(err)
				}
				defer closeNode(a)
				// The observer watches from the start, so it sees each
				// renewal as early as possible: the tightest case.
				obs := owner.NewObserver(m.Client("b"), a.Params())
				time.AfterFunc(ttl/2, func() { m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpPut, Fault: stall}) })
				var deadAt time.Time
				for deadAt.IsZero() {
					if err := obs.Refresh(t.Context()); err != nil {
						t.Fatal(err)
					}
					if !obs.Alive("a") {
						deadAt = time.Now()
					}
					time.Sleep(10 * time.Millisecond)
				}
				mu.Lock()
				defer mu.Unlock()
				if fencedAt.IsZero() || !fencedAt.Before(deadAt) {
					t.Fatalf("fenced at %v, observer called it dead at %v", fencedAt, deadAt)
				}
				mustCode(t, a.Err(), errcode.CodeNodeFenced)
			})
		})
	}
}

func TestNodeLeaseReplacedFencesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		a := openNode(t, m, "a")
		l, _ := a.Claim(t.Context(), "c", owner.ClaimOptions{})
		m.Set(owner.NodeKey("a"), []byte(`{"node":"a","incarnation":"other","seq":99}`))
		start := time.Now()
		<-a.Done()
		if d := time.Since(start); d > ttl/3 {
			t.Fatalf("fenced %v after replacement; want at the next renewal", d)
		}
		mustCode(t, l.Err(), errcode.CodeNodeFenced)
		if !strings.Contains(a.Err().Error(), "replaced") {
			t.Fatalf("fence reason: %v", a.Err())
		}
		if _, err := a.Claim(t.Context(), "d", owner.ClaimOptions{}); errcode.CodeOf(err) != errcode.CodeNodeFenced {
			t.Fatalf("a fenced node claimed: %v", err)
		}
	})
}

func TestNodeIDInUseIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		openNode(t, m, "a")
		dup := newNode(t, m, "a")
		err := dup.Open(t.Context())
		mustCode(t, err, errcode.CodeHeld)
	})
}

func TestRestartAfterCrashTakesNodeLeaseOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		a := openNode(t, m, "a")
		m.Partition("a", true) // crash: no more renewals, no release
		<-a.Done()
		m.Partition("a", false)
		restarted := newNode(t, m.Client("a2"), "a")
		start := time.Now()
		if err := restarted.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer closeNode(restarted)
		if w := time.Since(start); w < ttl {
			t.Fatalf("took over a possibly live lease after only %v", w)
		}
	})
}

func TestCloseReleasesEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		a := openNode(t, m, "a")
		b := openNode(t, m, "b")
		var leases []*owner.Lease
		for i := range 5 {
			l, err := a.Claim(t.Context(), fmt.Sprintf("c%d", i), owner.ClaimOptions{})
			if err != nil {
				t.Fatal(err)
			}
			leases = append(leases, l)
		}
		if err := a.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		for _, l := range leases {
			mustCode(t, l.Err(), errcode.CodeReleased)
		}
		start := time.Now()
		for i := range 5 {
			l, err := b.Claim(t.Context(), fmt.Sprintf("c%d", i), owner.ClaimOptions{})
			if err != nil || l.Epoch() != 2 {
				t.Fatalf("claim after close: %v", err)
			}
		}
		if time.Since(start) != 0 {
			t.Fatal("claims after a clean close had to wait")
		}
		b.Observer().Refresh(t.Context())
		for _, v := range b.Observer().View() {
			if v.Node == "a" && (v.Alive || !v.Released) {
				t.Fatalf("closed node seen as %+v", v)
			}
		}
	})
}

func TestWithAlwaysReleases(t *testing.T) {
	m := fakes3.NewMem()
	a, b := newNode(t, m, "a"), newNode(t, m, "b")
	boom := errors.New("boom")
	var seen *owner.Lease
	err := a.With(t.Context(), "c", func(l *owner.Lease) error { seen = l; return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("With returned %v", err)
	}
	mustCode(t, seen.Err(), errcode.CodeReleased)
	if r := record(t, m, "c"); !r.Released() {
		t.Fatalf("record not released: %+v", r)
	}
	if err := b.With(t.Context(), "c", func(l *owner.Lease) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptRecord(t *testing.T) {
	m := fakes3.NewMem()
	m.Set(owner.CellKey("c"), []byte("not json"))
	m.Set("cells/c/ltx/e6/0000000000000001.ltx", []byte("x"))
	a := newNode(t, m, "a")
	_, err := a.Claim(t.Context(), "c", owner.ClaimOptions{})
	mustCode(t, err, errcode.CodeCorruptOwner)
	if body, _ := m.Bytes(owner.CellKey("c")); string(body) != "not json" {
		t.Fatal("corrupt record was overwritten without force")
	}
	_, _, err = owner.Inspect(t.Context(), m, "c")
	mustCode(t, err, errcode.CodeCorruptOwner)
	l, err := a.Claim(t.Context(), "c", owner.ClaimOptions{Force: true})
	if err != nil || l.Epoch() != 7 {
		t.Fatalf("forced claim of corrupt record: %v, epoch %d (want above data epoch 6)", err, l.Epoch())
	}
}

func TestBadCellNameWritesNothing(t *testing.T) {
	m := fakes3.NewMem()
	a := newNode(t, m, "a")
	for _, cell := range []string{"", "..", "a/b", "x y"} {
		_, err := a.Claim(t.Context(), cell, owner.ClaimOptions{})
		mustCode(t, err, errcode.CodeInvalidName)
		_, err = owner.ReleaseCell(t.Context(), m, cell, "a", false)
		mustCode(t, err, errcode.CodeInvalidName)
	}
	if c := m.Counts(); c.Total() != 0 {
		t.Fatalf("bad names sent %d requests", c.Total())
	}
	if _, err := owner.NewNode(m, owner.Config{Name: "bad/node"}); errcode.CodeOf(err) != errcode.CodeInvalidName {
		t.Fatalf("bad node name: %v", err)
	}
}

func TestReleaseCell(t *testing.T) {
	m := fakes3.NewMem()
	a := newNode(t, m, "a")
	l, _ := a.Claim(t.Context(), "c", owner.ClaimOptions{})
	_, err := owner.ReleaseCell(t.Context(), m, "c", "b", false)
	mustCode(t, err, errcode.CodeNotHolder)
	if _, err := owner.ReleaseCell(t.Context(), m, "c", "a", false); err != nil {
		t.Fatal(err)
	}
	if r := record(t, m, "c"); !r.Released() || r.Epoch != 1 {
		t.Fatalf("%+v", r)
	}
	// The lease's own release now fails: the record changed under it.
	mustCode(t, l.Release(t.Context()), errcode.CodeSuperseded)
	l2, _ := a.Claim(t.Context(), "c", owner.ClaimOptions{})
	if _, err := owner.ReleaseCell(t.Context(), m, "c", "ops", true); err != nil {
		t.Fatal(err)
	}
	mustCode(t, l2.Release(t.Context()), errcode.CodeSuperseded)
}

// jsonMarshal is encoding/json without the import noise in table tests.
var jsonMarshal = func(v any) ([]byte, error) { return jsonMarshalImpl(v) }

// closeNode closes with a bound, as a daemon's shutdown would: a test that
// leaves a fault in place must not hang its cleanup.
func closeNode(n *owner.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n.Close(ctx)
}

// A forced claim of a corrupt record goes above the newest epoch the log
// names in deed's own key forms, announcements included; stray keys (an
// odd name in a huge epoch, upper-case hex, zero padding) count for
// nothing, so a stranger cannot push the cell to an epoch of its choosing.
func TestForcedClaimIgnoresStrayLogKeys(t *testing.T) {
	m := fakes3.NewMem()
	m.Set(owner.CellKey("c"), []byte("not json"))
	m.Set("cells/c/ltx/e6/0000000000000001.ltx", []byte("x"))
	m.Set("cells/c/ltx/announce/00000000000000000008", []byte("x"))
	for _, k := range []string{
		"cells/c/ltx/e5000000000/junk",
		"cells/c/ltx/e900/000000000000000A.ltx",
		"cells/c/ltx/e0900/0000000000000001.ltx",
		"cells/c/ltx/announce/900",
		"cells/c/ltx/e901/0000000000000000.ltx",
	} {
		m.Set(k, []byte("x"))
	}
	a := newNode(t, m, "a")
	l, err := a.Claim(t.Context(), "c", owner.ClaimOptions{Force: true})
	if err != nil || l.Epoch() != 9 {
		t.Fatalf("forced claim: %v, epoch %d (want 9: above the announced epoch 8)", err, l.Epoch())
	}
}

// A forced claim of a corrupt record over a log that shows no epoch goes to
// epoch 2, never 1: epoch 1 writes without announcing (its claim created
// own.json), so a first owner that has not written yet would otherwise
// share its epoch with the forced claim.
func TestForcedClaimOverEmptyLogSkipsEpoch1(t *testing.T) {
	m := fakes3.NewMem()
	m.Set(owner.CellKey("c"), []byte("not json"))
	a := newNode(t, m, "a")
	l, err := a.Claim(t.Context(), "c", owner.ClaimOptions{Force: true})
	if err != nil || l.Epoch() != 2 || l.Created() {
		t.Fatalf("forced claim: %v, epoch %d, created %v (want epoch 2, not created)", err, l.Epoch(), l.Created())
	}
}
