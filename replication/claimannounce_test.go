package replication_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// unmarkedEpoch stages the race the claim record's announcement exists
// for: b's claim takes a's released end (epoch 2, announced in own.json,
// no marker) and b's log opens on it but has not written yet; a lock-only
// claimer takes epoch 3 and releases (no end: its record carries epoch 2
// on); d claims epoch 4 over that release, opens its log and appends.
// d's LIST shows nothing of epoch 2, so only the record tells its walk to
// tombstone epoch 2's first slot. Then b appends. It returns the broken
// promise, if any: b's append must be refused (DEED-E021) and d's kept.
func unmarkedEpoch(t *testing.T) error {
	ctx := context.Background()
	m := fakes3.NewMem()
	g := newLedger()
	l1 := claim(t, m, "a", false)
	writeAndRelease(t, m, g, l1, "a", 2)
	l2 := claim(t, m, "b", false)
	if !l2.AnnouncedByClaim() {
		t.Fatal("b's claim took a's released end but does not announce its epoch")
	}
	before := m.Counts()
	lg2 := open(t, m, l2)
	if c := m.Counts().Sub(before); c.Put != 0 || c.List != 0 {
		t.Fatalf("b's Open sent %v, want no PUT (its claim announced it) and no LIST", c)
	}
	lockOnly := claim(t, m, "c", false) // b never opened its node: dead to c
	if err := lockOnly.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, _, err := owner.Inspect(ctx, m, cell); err != nil || rec.Announces != 2 || rec.End != nil {
		t.Fatalf("the lock-only release wrote %+v (%v), want announces 2 carried on and no end", rec, err)
	}
	l4 := claim(t, m, "d", false)
	if l4.Unmarked() != 2 {
		t.Fatalf("d's lease knows unmarked epoch %d, want 2", l4.Unmarked())
	}
	lg4 := open(t, m, l4)
	appendN(t, g, lg4, l4, "d", 1)
	err := g.append(ctx, lg2, l2, "b-late")
	if err == nil {
		return fmt.Errorf("epoch 2 appended after epoch 4 opened")
	}
	if _, verr := g.verify(m); verr != nil {
		return verr
	}
	mustCode(t, err, errcode.CodeSuperseded)
	return nil
}

func TestUnmarkedEpochIsFenced(t *testing.T) {
	if err := unmarkedEpoch(t); err != nil {
		t.Fatal(err)
	}
}

// A node's claim on its own release, whose seal its log saw land, trusts
// that end unread: its Open sends nothing, and the chain and the
// timestamps go on from the seal.
func TestOwnReleaseOpensWithoutARequest(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	g := newLedger()
	a, err := owner.NewNode(m, owner.Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	var lastTS int64
	for round := range 3 {
		l, err := a.Claim(ctx, cell, owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before := m.Counts()
		lg := open(t, m, l)
		if c := m.Counts().Sub(before); round > 0 && c.Total() != 0 {
			t.Fatalf("round %d: Open on this node's own release sent %v, want nothing", round, c)
		}
		if want := uint64(1 + 2*round); uint64(lg.Start().Next) != want {
			t.Fatalf("round %d: the chain starts at slot %d, want %d (after the seal)", round, lg.Start().Next, want)
		}
		appendN(t, g, lg, l, fmt.Sprintf("a%d-", round), 2)
		tail, err := lg.Tail(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tail.TS < lastTS {
			t.Fatalf("round %d: timestamp %d below the previous epoch's %d", round, tail.TS, lastTS)
		}
		lastTS = tail.TS
		if err := lg.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	g.check(t, m)
}

// owner reads the seal a released end names with the claim, at the key it
// builds itself (owner cannot import this package): the same literal is
// pinned there (TestSealKeyIsTheLogsSlotKey).
func TestSlotKeyForm(t *testing.T) {
	if got, want := replication.SlotKey("c1", 12, 0xab), "cells/c1/ltx/e12/00000000000000ab.ltx"; got != want {
		t.Fatalf("SlotKey = %q, want %q", got, want)
	}
}
