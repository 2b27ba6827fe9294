package replication_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// A release records where its log sealed the chain; the next epoch (its
// claim replaced that release, and announced itself in its record) starts
// there: its claim reads the seal with its PUT (nothing on the releasing
// node's own claim), and its Open sends nothing: no marker, no re-check,
// no LIST, no walk.
func TestReleasedEndSkipsTheWalk(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	g := newLedger()
	a, err := owner.NewNode(m, owner.Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	l1, err := a.Claim(ctx, cell, owner.ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writeAndRelease(t, m, g, l1, "a", 3)
	rec, _, err := owner.Inspect(ctx, m, cell)
	if err != nil || rec.End == nil || *rec.End != (owner.End{TxID: 4, Pos: 4}) {
		t.Fatalf("release record %+v (%v), want its end at slot 4, position 4", rec, err)
	}
	for _, who := range []string{"a", "b"} { // a: its own hint; b: reads the record
		var l *owner.Lease
		if who == "a" {
			if l, err = a.Claim(ctx, cell, owner.ClaimOptions{}); err != nil {
				t.Fatal(err)
			}
		} else {
			l = claim(t, m, who, false)
		}
		before := m.Counts()
		lg := open(t, m, l)
		if c := m.Counts().Sub(before); c.Total() != 0 {
			t.Fatalf("%s: Open after a release with its end sent %v, want nothing (its claim announced it, and read the seal with its PUT unless it was its own)", who, c)
		}
		appendN(t, g, lg, l, who+"-next", 1)
		if err := lg.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	g.check(t, m)
}

// forgedEnd rewrites the released record to name a chain end the log does
// not have (slot 2, where a record is), as a stale or forged record could,
// and has another node claim and append. It returns the broken promise,
// if any.
func forgedEnd(t *testing.T) error {
	ctx := context.Background()
	m := fakes3.NewMem()
	g := newLedger()
	l1 := claim(t, m, "a", false)
	writeAndRelease(t, m, g, l1, "a", 3)
	m.Set(owner.CellKey(cell), fmt.Appendf(nil, `{"node":"","epoch":1,"nonce":"forged","at_ms":1,"end":{"txid":2,"pos":2}}`))
	l2 := claim(t, m, "b", false)
	lg2 := open(t, m, l2)
	if err := g.append(ctx, lg2, l2, "b0"); err != nil {
		return fmt.Errorf("append after the forged end: %w", err)
	}
	_, err := g.verify(m)
	return err
}

func TestForgedReleasedEndIsChecked(t *testing.T) {
	if err := forgedEnd(t); err != nil {
		t.Fatal(err)
	}
}
