package replication_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// lateAnnouncer stages the race the re-check exists for. Owner a writes
// a0 at epoch 1. Owner p claims epoch 2 and starts to open its log, but its
// announcement PUT takes an hour to arrive. Meanwhile n claims epoch 3,
// opens (its LIST shows no announcement of epoch 2, so it seals epoch 1
// and tombstones nothing) and appends n0. Then p's announcement lands and
// p's Open goes on. It returns p's Open error and, if p opened, p's log.
func lateAnnouncer(t *testing.T, m *fakes3.Mem, g *ledger) (*replication.Log, *owner.Lease, error) {
	t.Helper()
	ctx := context.Background()
	la := claim(t, m, "a", false)
	logA := open(t, m, la)
	appendN(t, g, logA, la, "a", 1)

	pc := m.Client("p")
	lp := claim(t, pc, "p", true)
	m.Inject(fakes3.Rule{Op: fakes3.OpPut, Key: replication.AnnounceKey(cell, lp.Epoch()), Latency: time.Hour, Times: 1})
	type opened struct {
		lg  *replication.Log
		err error
	}
	done := make(chan opened, 1)
	go func() {
		lg, err := replication.Open(ctx, pc, lp, replication.WithRequestTimeout(2*time.Hour))
		done <- opened{lg, err}
	}()
	synctest.Wait() // p's announcement is on its way

	ln := claim(t, m, "n", true)
	logN := open(t, m, ln)
	appendN(t, g, logN, ln, "n", 1)

	o := <-done // the clock runs on: p's announcement lands
	if o.lg != nil {
		t.Cleanup(func() { _ = o.lg.Close(context.Background()) })
	}
	return o.lg, lp, o.err
}

// The sound rule: p re-reads the ownership record after its announcement
// landed, sees epoch 3 and writes nothing; n's record stays on the chain.
func TestLateAnnouncerIsFencedByRecheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		g := newLedger()
		_, lp, err := lateAnnouncer(t, m, g)
		mustCode(t, err, errcode.CodeSuperseded)
		mustCode(t, lp.Err(), errcode.CodeSuperseded)
		if recs := g.check(t, m); !slices.Equal(data(recs), []string{"a0", "n0"}) {
			t.Fatalf("read %q", data(recs))
		}
	})
}

// Lock-only claims between two data owners cost nothing: the data owner
// after them writes one tombstone per announced epoch, none for the
// lock-only ones, and readers skip them without a request each.
func TestLockOnlyClaimsAreNotTombstoned(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	g := newLedger()
	la := claim(t, m, "a", false)
	logA := open(t, m, la)
	appendN(t, g, logA, la, "a", 2)
	for i := range 50 {
		l := claim(t, m, "lock", true)
		if i == 49 {
			break
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lb := claim(t, m, "b", true)
	before := m.Counts()
	logB := open(t, m, lb)
	if d := m.Counts().Sub(before); d.Put != 2 {
		t.Fatalf("open after 50 lock-only claims made %d PUTs, want 2 (announcement, seal)", d.Put)
	}
	appendN(t, g, logB, lb, "b", 2)
	mustCode(t, g.append(ctx, logA, la, "a-stale"), errcode.CodeSuperseded)
	if recs := g.check(t, m); !slices.Equal(data(recs), []string{"a0", "a1", "b0", "b1"}) {
		t.Fatalf("read %q", data(recs))
	}
	for _, k := range m.Keys(replication.LogPrefix(cell)) {
		if !strings.Contains(k, "/e1/") && !strings.Contains(k, "/e52/") && !strings.Contains(k, "/announce/") {
			t.Fatalf("a lock-only epoch got a file: %s", k)
		}
	}
}

// pointerRace stages a seal whose "sealed by" epoch starts its chain later
// than the seal's slot. Owner a (epoch 1) writes a0 at slot 1. Owner y
// (epoch 2) claims, announces, lists, and is slow to read slot 2 of epoch
// 1. Owner b (epoch 3) claims, lists (y is announced, without records),
// seals epoch 1 at slot 2 and sends a tombstone for epoch 2 at slot 2 that
// is slow to arrive. y's read of slot 2 is served: b's seal, so y's chain
// starts at slot 2 of epoch 2, and y appends y0 there. b's tombstone then
// meets y0 (412): b follows y's chain, seals it at 3 and starts at 3.
// b appends b0. It returns what a reader sees.
func pointerRace(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	m := fakes3.NewMem()
	g := newLedger()
	la := claim(t, m, "a", false)
	logA := open(t, m, la)
	appendN(t, g, logA, la, "a", 1)

	yc := m.Client("y")
	ly := claim(t, yc, "y", true)
	m.Inject(fakes3.Rule{Client: "y", Op: fakes3.OpGet, Key: replication.SlotKey(cell, 1, 2), Latency: time.Second, Times: 1})
	type opened struct {
		lg  *replication.Log
		err error
	}
	yDone := make(chan opened, 1)
	go func() {
		lg, err := replication.Open(ctx, yc, ly)
		yDone <- opened{lg, err}
	}()
	synctest.Wait() // y waits for slot 2 of epoch 1

	bc := m.Client("b")
	lb := claim(t, bc, "b", true)
	m.Inject(fakes3.Rule{Client: "b", Op: fakes3.OpPut, Key: replication.SlotKey(cell, 2, 2), Latency: 2 * time.Second, Times: 1})
	bDone := make(chan opened, 1)
	go func() {
		lg, err := replication.Open(ctx, bc, lb)
		bDone <- opened{lg, err}
	}()

	y := <-yDone
	if y.err != nil {
		t.Fatalf("y's open: %v", y.err)
	}
	t.Cleanup(func() { _ = y.lg.Close(context.Background()) })
	if h := y.lg.Start(); h.Next != 2 {
		t.Fatalf("y starts at %+v, want slot 2", h)
	}
	if err := g.append(ctx, y.lg, ly, "y0"); err != nil {
		t.Fatalf("y's append: %v", err)
	}
	b := <-bDone
	if b.err != nil {
		t.Fatalf("b's open: %v", b.err)
	}
	t.Cleanup(func() { _ = b.lg.Close(context.Background()) })
	if h := b.lg.Start(); h.Next != 3 {
		t.Fatalf("b starts at %+v, want slot 3 (after y0)", h)
	}
	if err := g.append(ctx, b.lg, lb, "b0"); err != nil {
		t.Fatalf("b's append: %v", err)
	}
	recs, err := replication.Read(ctx, m, cell, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return data(recs)
}

// The restore rule scans the announced epochs above a seal: y0 and b0 are
// read although the seal at e1/2 names epoch 3.
func TestSealNamingALaterEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if got := pointerRace(t); !slices.Equal(got, []string{"a0", "y0", "b0"}) {
			t.Fatalf("read %q", got)
		}
	})
}
