package replication_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// The first owner of a cell (its claim created own.json: epoch 1) opens its
// log with no request and writes slot 1 at once: the create-only PUT of
// that slot is its fence.
func TestCreatedLeaseOpensWithoutRequests(t *testing.T) {
	m := fakes3.NewMem()
	l := claim(t, m, "a", false)
	if !l.Created() || l.Epoch() != 1 {
		t.Fatalf("first claim: created %v epoch %d", l.Created(), l.Epoch())
	}
	before := m.Counts()
	lg := open(t, m, l)
	if c := m.Counts().Sub(before); c.Total() != 0 {
		t.Fatalf("Open of a created lease sent %v, want nothing", c)
	}
	g := newLedger()
	appendN(t, g, lg, l, "a", 2)
	if c := m.Counts().Sub(before); c.Total() != 2 {
		t.Fatalf("two appends after Open sent %v, want 2 PUTs", c)
	}
	if err := lg.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A second Open on the same lease walks: it finds its own seal.
	if _, err := replication.Open(context.Background(), m, l); errcode.CodeOf(err) != errcode.CodeBadRequest {
		t.Fatalf("second Open of a closed epoch-1 log: %v, want %s", err, errcode.CodeBadRequest)
	}
	g.check(t, m)
}

// epoch1Race stages the race the implicit announcement of epoch 1 is for:
// epoch 1 opens (no request) and stalls before its first write; epoch 2
// takes over (forced), opens and appends; then epoch 1's first append is
// sent. It returns the broken promise, if any: epoch 1's append must be
// refused (the walk of epoch 2 tombstoned slot 1 of epoch 1) and epoch 2's
// acknowledged record must be read back.
func epoch1Race(t *testing.T) error {
	ctx := context.Background()
	m := fakes3.NewMem()
	g := newLedger()
	l1 := claim(t, m, "a", false)
	lg1 := open(t, m, l1)
	l2 := claim(t, m, "b", true)
	lg2 := open(t, m, l2)
	if err := g.append(ctx, lg2, l2, "b0"); err != nil {
		t.Fatalf("append by epoch 2: %v", err)
	}
	err := g.append(ctx, lg1, l1, "a0")
	if err == nil {
		if _, verr := g.verify(m); verr != nil {
			return fmt.Errorf("stale epoch 1 acknowledged: %w", verr)
		}
		return fmt.Errorf("stale epoch 1's append acknowledged")
	}
	if !isCode(err, errcode.CodeSuperseded) {
		t.Fatalf("stale epoch 1's append: %v, want %s", err, errcode.CodeSuperseded)
	}
	_, verr := g.verify(m)
	return verr
}

func TestEpoch1FencedByItsFirstSlot(t *testing.T) {
	if err := epoch1Race(t); err != nil {
		t.Fatal(err)
	}
}
