package replication_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// A forced takeover: the stale owner's first append after the seal fails
// with DEED-E021 and ends its lease; nothing it wrote after the seal is ever
// read; everything it was acknowledged for is read by the new owner.
func TestStaleOwnerFencedAfterForcedTakeover(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	a, b := m.Client("a"), m.Client("b")
	g := newLedger()

	la := claim(t, a, "a", false)
	logA := open(t, a, la)
	appendN(t, g, logA, la, "a", 5)

	lb := claim(t, b, "b", true)
	if lb.Epoch() != 2 {
		t.Fatalf("epoch %d", lb.Epoch())
	}
	// Claiming alone fences nothing: the old owner may still append until
	// the new one seals (no acknowledged record is lost either way).
	appendN(t, g, logA, la, "a-late", 2)
	logB := open(t, b, lb)
	if h := logB.Start(); h.Next != 8 || h.NextPos != 8 {
		t.Fatalf("new owner starts at %+v, want slot 8 position 8", h)
	}
	if _, ok := m.Bytes(replication.SlotKey(cell, 1, 8)); !ok {
		t.Fatal("no seal at e1/8")
	}

	err := g.append(ctx, logA, la, "a-stale")
	mustCode(t, err, errcode.CodeSuperseded)
	mustCode(t, la.Err(), errcode.CodeSuperseded)
	// Every later append fails the same way, without a request.
	before := m.Counts()
	mustCode(t, g.append(ctx, logA, la, "a-stale-2"), errcode.CodeSuperseded)
	if d := m.Counts().Sub(before); d.Total() != 0 {
		t.Fatalf("a refused append sent %d requests", d.Total())
	}

	appendN(t, g, logB, lb, "b", 3)
	recs := g.check(t, m)
	want := []string{"a0", "a1", "a2", "a3", "a4", "a-late0", "a-late1", "b0", "b1", "b2"}
	if !slices.Equal(data(recs), want) {
		t.Fatalf("read %q, want %q", data(recs), want)
	}
}

// The new owner crashes after claiming and before sealing: the old owner
// goes on (nothing fences it yet), a third owner then seals the first
// epoch. The crashed one never announced, so it gets no tombstone: when it
// wakes up it announces, re-reads the ownership record, sees epoch 3 and
// writes nothing. Both stale owners are fenced.
func TestNewOwnerCrashesBeforeSealing(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	g := newLedger()
	la := claim(t, m.Client("a"), "a", false)
	logA := open(t, m.Client("a"), la)
	appendN(t, g, logA, la, "a", 3)

	lb := claim(t, m.Client("b"), "b", true) // crashes: never opens
	appendN(t, g, logA, la, "a-after-b", 2)

	lc := claim(t, m.Client("c"), "c", true)
	logC := open(t, m.Client("c"), lc)
	if h := logC.Start(); h.Next != 6 {
		t.Fatalf("third owner starts at %+v", h)
	}
	k := replication.SlotKey(cell, 1, 6)
	body, ok := m.Bytes(k)
	if !ok {
		t.Fatalf("%s missing", k)
	}
	f, err := replication.Decode(k, body)
	if err != nil {
		t.Fatal(err)
	}
	if f.Kind != replication.KindSeal || f.By != 3 {
		t.Fatalf("%s is a %s by %d, want a seal by 3", k, f.Kind, f.By)
	}
	if _, ok := m.Bytes(replication.SlotKey(cell, 2, 6)); ok {
		t.Fatalf("epoch 2 never announced, yet it got a tombstone")
	}
	mustCode(t, g.append(ctx, logA, la, "a-stale"), errcode.CodeSuperseded)

	// The crashed owner wakes up: its re-check fences it before it writes.
	_, err = replication.Open(ctx, m.Client("b"), lb)
	mustCode(t, err, errcode.CodeSuperseded)
	mustCode(t, lb.Err(), errcode.CodeSuperseded)

	appendN(t, g, logC, lc, "c", 2)
	recs := g.check(t, m)
	if len(recs) != 7 {
		t.Fatalf("read %q", data(recs))
	}
}

// The second owner seals the first and crashes before writing; the third
// finds the seal (accepted as the end) and tombstones the second (it
// announced), whose late append is fenced.
func TestNewOwnerCrashesAfterSealing(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	g := newLedger()
	la := claim(t, m, "a", false)
	logA := open(t, m, la)
	appendN(t, g, logA, la, "a", 2)
	lb := claim(t, m, "b", true)
	logB := open(t, m, lb) // seals e1/3, writes nothing
	lc := claim(t, m, "c", true)
	before := m.Counts()
	logC := open(t, m, lc)
	if d := m.Counts().Sub(before); d.Put != 2 {
		t.Fatalf("third owner made %d PUTs, want 2 (its announcement, the tombstone of e2)", d.Put)
	}
	mustCode(t, g.append(ctx, logB, lb, "b-stale"), errcode.CodeSuperseded)
	mustCode(t, g.append(ctx, logA, la, "a-stale"), errcode.CodeSuperseded)
	appendN(t, g, logC, lc, "c", 2)
	if recs := g.check(t, m); !slices.Equal(data(recs), []string{"a0", "a1", "c0", "c1"}) {
		t.Fatalf("read %q", data(recs))
	}
}

// Three claims before anyone writes: the fourth owner tombstones the one
// that announced (opened its log) at slot 1, and leaves the two lock-only
// claims alone; each of the three is fenced before its first write.
func TestThreeClaimsBeforeAnyWrite(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	g := newLedger()
	la := claim(t, m, "a", false)
	logA := open(t, m, la) // opened, but writes nothing yet
	lb := claim(t, m, "b", true)
	lc := claim(t, m, "c", true)
	ld := claim(t, m, "d", true)
	logD := open(t, m, ld)
	if h := logD.Start(); h.Next != 1 || h.NextPos != 1 {
		t.Fatalf("fourth owner starts at %+v", h)
	}
	for e := uint64(1); e <= 3; e++ {
		k := replication.SlotKey(cell, e, 1)
		body, ok := m.Bytes(k)
		if e > 1 {
			if ok {
				t.Fatalf("%s: a tombstone in an epoch that never announced", k)
			}
			continue
		}
		if !ok {
			t.Fatalf("%s missing", k)
		}
		if f, err := replication.Decode(k, body); err != nil || f.Kind != replication.KindTombstone {
			t.Fatalf("%s: %+v %v", k, f, err)
		}
	}
	appendN(t, g, logD, ld, "d", 2)
	mustCode(t, g.append(ctx, logA, la, "a-stale"), errcode.CodeSuperseded)
	for _, l := range []*owner.Lease{lb, lc} {
		_, err := replication.Open(ctx, m, l)
		mustCode(t, err, errcode.CodeSuperseded)
	}
	if recs := g.check(t, m); !slices.Equal(data(recs), []string{"d0", "d1"}) {
		t.Fatalf("read %q", data(recs))
	}
}

// Two claimers open concurrently (the older one's walk racing the newer
// one's), many times with different interleavings: whatever happens, the
// older one is fenced or writes before the newer one starts, and nothing
// acknowledged is lost.
func TestConcurrentOpens(t *testing.T) {
	for i := 0; i < 50; i++ {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			m := fakes3.NewMem()
			m.Inject(fakes3.Rule{Latency: time.Duration(i%7) * time.Millisecond, Client: "b"})
			m.Inject(fakes3.Rule{Latency: time.Duration(i%5) * time.Millisecond, Client: "c"})
			m.Inject(fakes3.Rule{Latency: time.Duration(1+i%3) * time.Millisecond, Client: "a"})
			g := newLedger()
			la := claim(t, m.Client("a"), "a", false)
			logA := open(t, m.Client("a"), la)
			appendN(t, g, logA, la, "a", 3)
			lb := claim(t, m.Client("b"), "b", true)
			lc := claim(t, m.Client("c"), "c", true)
			var wg sync.WaitGroup
			for _, x := range []struct {
				b bucket.Bucket
				l *owner.Lease
			}{{m.Client("b"), lb}, {m.Client("c"), lc}} {
				wg.Go(func() {
					lg, err := replication.Open(ctx, x.b, x.l)
					if err != nil {
						if errcode.CodeOf(err) != errcode.CodeSuperseded {
							t.Errorf("open %d: %v", x.l.Epoch(), err)
						}
						return
					}
					defer lg.Close(ctx)
					for k := 0; k < 3; k++ {
						if err := g.append(ctx, lg, x.l, fmt.Sprintf("e%d-%d", x.l.Epoch(), k)); err != nil {
							if errcode.CodeOf(err) != errcode.CodeSuperseded {
								t.Errorf("append: %v", err)
							}
							return
						}
					}
				})
			}
			wg.Go(func() {
				for k := 0; k < 200; k++ {
					if g.append(ctx, logA, la, fmt.Sprintf("a-late%d", k)) != nil {
						return
					}
				}
			})
			wg.Wait()
			g.check(t, m)
			_ = logA.Close(ctx)
		})
	}
}

// Close seals the chain's end, so the next owner opens with no PUT at all.
func TestCloseSealsChainEnd(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	g := newLedger()
	la := claim(t, m, "a", false)
	logA := open(t, m, la)
	appendN(t, g, logA, la, "a", 3)
	if err := logA.Close(ctx); err != nil {
		t.Fatal(err)
	}
	body, ok := m.Bytes(replication.SlotKey(cell, 1, 4))
	if !ok {
		t.Fatal("Close wrote no seal")
	}
	if f, err := replication.Decode(replication.SlotKey(cell, 1, 4), body); err != nil || f.Kind != replication.KindSeal || f.By != 1 {
		t.Fatalf("seal %+v %v", f, err)
	}
	mustCode(t, g.append(ctx, logA, la, "late"), errcode.CodeBadRequest)
	if err := logA.Close(ctx); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := claim(t, m, "b", false) // released: no force needed
	before := m.Counts()
	logB := open(t, m, lb)
	if d := m.Counts().Sub(before); d.Put != 0 {
		t.Fatalf("open after a clean handover made %d PUTs, want none (the claim record announced its epoch)", d.Put)
	}
	appendN(t, g, logB, lb, "b", 1)
	if recs := g.check(t, m); !slices.Equal(data(recs), []string{"a0", "a1", "a2", "b0"}) {
		t.Fatalf("read %q", data(recs))
	}
	// A log cannot be reopened on a lease whose log was closed.
	lb2 := claim(t, m, "b", false)
	logB2 := open(t, m, lb2)
	_ = logB2.Close(ctx)
	_, err := replication.Open(ctx, m, lb2)
	mustCode(t, err, errcode.CodeBadRequest)
}

// The read barrier costs one HEAD while the owner is current, and reports
// DEED-E021 once a newer epoch sealed it.
func TestReadBarrier(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	g := newLedger()
	la := claim(t, m, "a", false)
	logA := open(t, m, la)
	appendN(t, g, logA, la, "a", 4)
	c0 := m.Counts()
	recs, err := logA.Read(ctx, 2, 0, false)
	if err != nil || !slices.Equal(data(recs), []string{"a2", "a3"}) {
		t.Fatalf("read %q %v", data(recs), err)
	}
	c1 := m.Counts()
	recs, err = logA.Read(ctx, 2, 0, true)
	if err != nil || !slices.Equal(data(recs), []string{"a2", "a3"}) {
		t.Fatalf("read %q %v", data(recs), err)
	}
	plain, barrier := c1.Sub(c0), m.Counts().Sub(c1)
	if plain.List != 0 {
		t.Fatalf("the owner's read listed the log: %+v", plain)
	}
	if d := barrier.Sub(plain); d != (fakes3.Counts{Head: 1}) {
		t.Fatalf("the barrier cost %+v, want one HEAD", d)
	}
	lb := claim(t, m, "b", true)
	logB := open(t, m, lb)
	appendN(t, g, logB, lb, "b", 1)
	// Without the barrier a stale owner may read (the chain is the truth,
	// it reads through the seal); with it, it learns it is fenced.
	recs, err = logA.Read(ctx, 0, 0, false)
	if err != nil || len(recs) != 5 {
		t.Fatalf("stale read %q %v", data(recs), err)
	}
	_, err = logA.Read(ctx, 0, 0, true)
	mustCode(t, err, errcode.CodeSuperseded)
	mustCode(t, la.Err(), errcode.CodeSuperseded)
	recs, err = logB.Read(ctx, 4, 10, true)
	if err != nil || !slices.Equal(data(recs), []string{"b0"}) {
		t.Fatalf("read %q %v", data(recs), err)
	}
}

// Data-path calls refuse a lease that is zero, released or not the log's.
func TestLeaseRefused(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	_, err := replication.Open(ctx, m, &owner.Lease{})
	mustCode(t, err, errcode.CodeInvalidLease)
	_, err = replication.Open(ctx, m, nil)
	mustCode(t, err, errcode.CodeInvalidLease)

	la := claim(t, m, "a", false)
	logA := open(t, m, la)
	_, err = logA.Append(ctx, &owner.Lease{}, []byte("x"))
	mustCode(t, err, errcode.CodeInvalidLease)
	_, err = replication.Open(ctx, m, la)
	mustCode(t, err, errcode.CodeBadRequest) // one log per lease

	n2, _ := owner.NewNode(m, owner.Config{Name: "z"})
	other, err := n2.Claim(ctx, "other-cell", owner.ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = logA.Append(ctx, other, []byte("x"))
	mustCode(t, err, errcode.CodeNotHolder)
	_, err = logA.Snapshot(ctx, other, 1, nil)
	mustCode(t, err, errcode.CodeNotHolder)

	if err := logA.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = logA.Append(ctx, la, []byte("x"))
	mustCode(t, err, errcode.CodeReleased)
	// A barrier read borrows the lease as Append does, and is refused the
	// same way; a plain read acts for nobody and still reads.
	_, err = logA.Read(ctx, 0, 0, true)
	mustCode(t, err, errcode.CodeReleased)
	if _, err := logA.Read(ctx, 0, 0, false); err != nil {
		t.Fatalf("plain read after release: %v", err)
	}
	_, err = replication.Open(ctx, m, la)
	mustCode(t, err, errcode.CodeReleased)

	// Released without Close (no seal at the chain end): a barrier read is
	// refused before it sends anything, not answered as if this log were
	// still the cell's writer.
	lc := claim(t, m, "c", false)
	logC := open(t, m, lc)
	if err := lc.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c0 := m.Counts()
	_, err = logC.Read(ctx, 0, 0, true)
	mustCode(t, err, errcode.CodeReleased)
	if d := m.Counts().Sub(c0); d.Total() != 0 {
		t.Fatalf("the refused barrier read sent requests: %v", d)
	}
}
