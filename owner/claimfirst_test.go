package owner_test

import (
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// counted runs f and returns the requests it sent to m.
func counted(m *fakes3.Mem, f func()) fakes3.Counts {
	before := m.Counts()
	f()
	return m.Counts().Sub(before)
}

func wantCounts(t *testing.T, what string, got, want fakes3.Counts) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: sent %+v, want %+v", what, got, want)
	}
}

// A cell nobody ever claimed is claimed with one create-only PUT: no read.
func TestNeverClaimedCellIsOnePut(t *testing.T) {
	m := fakes3.NewMem()
	a := newNode(t, m, "a")
	var l *owner.Lease
	var err error
	c := counted(m, func() { l, err = a.Claim(t.Context(), "c", owner.ClaimOptions{}) })
	if err != nil || l.Epoch() != 1 {
		t.Fatalf("claim: %v, epoch %d", err, l.Epoch())
	}
	wantCounts(t, "never-claimed cell", c, fakes3.Counts{Put: 1})
	if r := record(t, m, "c"); r.Node != "a" || r.Epoch != 1 || r.Nonce != l.Token() {
		t.Fatalf("record %+v", r)
	}
}

// A cell this node released is claimed again with one If-Match PUT on the
// ETag its release produced, at the next epoch.
func TestReclaimAfterOwnReleaseIsOnePut(t *testing.T) {
	m := fakes3.NewMem()
	a := newNode(t, m, "a")
	for epoch := uint64(1); epoch <= 3; epoch++ {
		var l *owner.Lease
		var err error
		c := counted(m, func() { l, err = a.Claim(t.Context(), "c", owner.ClaimOptions{}) })
		if err != nil || l.Epoch() != epoch {
			t.Fatalf("claim %d: %v, epoch %d", epoch, err, l.Epoch())
		}
		wantCounts(t, "claim", c, fakes3.Counts{Put: 1})
		if r := record(t, m, "c"); r.Node != "a" || r.Epoch != epoch || r.Nonce != l.Token() {
			t.Fatalf("record %+v", r)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// A cell released by another process after this node's own release: the
// remembered ETag no longer matches, so the If-Match PUT is refused and the
// claim reads and decides (412, GET, PUT: 3 requests), at the epoch above
// the other process's.
func TestReclaimAfterOtherReleaseReadsAgain(t *testing.T) {
	m := fakes3.NewMem()
	a, b := newNode(t, m, "a"), newNode(t, m, "b")
	for _, n := range []*owner.Node{a, b} {
		l, err := n.Claim(t.Context(), "c", owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	var l *owner.Lease
	var err error
	c := counted(m, func() { l, err = a.Claim(t.Context(), "c", owner.ClaimOptions{}) })
	if err != nil || l.Epoch() != 3 {
		t.Fatalf("claim: %v, epoch %d", err, l.Epoch())
	}
	wantCounts(t, "re-claim after another's release", c, fakes3.Counts{Get: 1, Put: 2})
}

// A corrupt own.json refuses the create; the read that follows finds it
// corrupt: DEED-E030 as before, and the record is left as it was.
func TestFirstCreateOnCorruptRecordIsRefused(t *testing.T) {
	m := fakes3.NewMem()
	m.Set(owner.CellKey("c"), []byte("not json"))
	a := newNode(t, m, "a")
	var err error
	c := counted(m, func() { _, err = a.Claim(t.Context(), "c", owner.ClaimOptions{}) })
	mustCode(t, err, errcode.CodeCorruptOwner)
	wantCounts(t, "corrupt record", c, fakes3.Counts{Get: 1, Put: 1})
	if body, _ := m.Bytes(owner.CellKey("c")); string(body) != "not json" {
		t.Fatal("corrupt record was overwritten")
	}
}

// A cell held by a live node: the create is refused, the read names the
// holder (DEED-E020). A second attempt reads first: the node remembers that
// the cell exists, so a waiting claimer's polls cost what they did.
func TestHeldCellIsReadFirstOnceKnown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		a, b := openNode(t, m, "a"), openNode(t, m, "b")
		if _, err := a.Claim(t.Context(), "c", owner.ClaimOptions{}); err != nil {
			t.Fatal(err)
		}
		var err error
		c := counted(m, func() { _, err = b.Claim(t.Context(), "c", owner.ClaimOptions{}) })
		mustCode(t, err, errcode.CodeHeld)
		wantCounts(t, "first claim of a held cell", c, fakes3.Counts{Get: 1, Put: 1})
		c = counted(m, func() { _, err = b.Claim(t.Context(), "c", owner.ClaimOptions{}) })
		mustCode(t, err, errcode.CodeHeld)
		wantCounts(t, "second claim of a held cell", c, fakes3.Counts{Get: 1})
	})
}

// A forced claim never guesses: it reads the record (here absent) first.
func TestForcedClaimReadsFirst(t *testing.T) {
	m := fakes3.NewMem()
	a := newNode(t, m, "a")
	var l *owner.Lease
	var err error
	c := counted(m, func() { l, err = a.Claim(t.Context(), "c", owner.ClaimOptions{Force: true}) })
	if err != nil || l.Epoch() != 1 {
		t.Fatalf("claim: %v", err)
	}
	wantCounts(t, "forced claim", c, fakes3.Counts{Get: 1, Put: 1})
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Released by this node, with data of a later epoch under ltx/ (written
	// by a forced claimer whose own.json update was overwritten): a forced
	// claim of a corrupt record must look at the data, so it reads.
	m.Set(owner.CellKey("c"), []byte("{"))
	m.Set("cells/c/ltx/e9/0000000000000001.ltx", []byte("x"))
	l, err = a.Claim(t.Context(), "c", owner.ClaimOptions{Force: true})
	if err != nil || l.Epoch() != 10 {
		t.Fatalf("forced claim: %v, epoch %d (want 10, above data epoch 9)", err, l.Epoch())
	}
}

// The first write's outcome is unknown: it is settled by reading back, never
// reported as a refusal, whichever first write it was.
func TestFirstWriteAmbiguity(t *testing.T) {
	for _, c := range []struct {
		name     string
		released bool // the first write is the If-Match re-claim
		fault    fakes3.Fault
		readDown bool // every read fails too
		code     errcode.Code
		epoch    uint64
	}{
		{name: "create landed, answer lost", fault: fakes3.ErrAfter, epoch: 1},
		{name: "create did not land", fault: fakes3.ErrBefore, epoch: 1},
		{name: "create unknown, reads fail", fault: fakes3.ErrAfter, readDown: true, code: errcode.CodeAmbiguous},
		{name: "create answered 503, reads fail", fault: fakes3.SlowDown, readDown: true, code: errcode.CodeAmbiguous},
		{name: "re-claim landed, answer lost", released: true, fault: fakes3.ErrAfter, epoch: 2},
		{name: "re-claim did not land", released: true, fault: fakes3.ErrBefore, epoch: 2},
		{name: "re-claim unknown, reads fail", released: true, fault: fakes3.ErrAfter, readDown: true, code: errcode.CodeAmbiguous},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := fakes3.NewMem()
				a := newNode(t, m, "a")
				if c.released {
					l, err := a.Claim(t.Context(), "c", owner.ClaimOptions{})
					if err != nil {
						t.Fatal(err)
					}
					if err := l.Release(t.Context()); err != nil {
						t.Fatal(err)
					}
				}
				m.Inject(fakes3.Rule{Op: fakes3.OpPut, Fault: c.fault, Times: 1})
				if c.readDown {
					m.Inject(fakes3.Rule{Op: fakes3.OpGet, Fault: fakes3.SlowDown})
				}
				l, err := a.Claim(t.Context(), "c", owner.ClaimOptions{})
				if c.code != "" {
					mustCode(t, err, c.code)
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if r := record(t, m, "c"); l.Epoch() != c.epoch || r.Epoch != c.epoch || r.Nonce != l.Token() || r.Node != "a" {
					t.Fatalf("lease epoch %d, record %+v", l.Epoch(), r)
				}
			})
		})
	}
}

// A node that meets cells which exist although it knows nothing of them (a
// dead peer's cells, cells another node released) stops sending the
// create-only PUT first after one refusal, and reads first (2 requests a
// claim); it returns to creating first once as many unknown cells turned
// out never claimed.
func TestUnknownCellsThatExistAreReadFirst(t *testing.T) {
	m := fakes3.NewMem()
	a, b := newNode(t, m, "a"), newNode(t, m, "b")
	for i := range 3 {
		l, err := a.Claim(t.Context(), fmt.Sprintf("x%d", i), owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		cell string
		want fakes3.Counts
	}{
		{"x0", fakes3.Counts{Put: 2, Get: 1}}, // create refused, read, take
		{"x1", fakes3.Counts{Put: 1, Get: 1}}, // read first
		{"x2", fakes3.Counts{Put: 1, Get: 1}},
		{"n0", fakes3.Counts{Put: 1, Get: 1}}, // never claimed, but read first: 404
		{"n1", fakes3.Counts{Put: 1, Get: 1}},
		{"n2", fakes3.Counts{Put: 1, Get: 1}},
		{"n3", fakes3.Counts{Put: 1}}, // as many absent as existing: create first again
		{"n4", fakes3.Counts{Put: 1}},
	}
	for _, s := range steps {
		var err error
		c := counted(m, func() { _, err = b.Claim(t.Context(), s.cell, owner.ClaimOptions{}) })
		if err != nil {
			t.Fatal(err)
		}
		wantCounts(t, "claim "+s.cell, c, s.want)
	}
}
