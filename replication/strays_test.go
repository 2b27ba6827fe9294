package replication_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// strays are keys under a cell's log prefix that deed never writes.
var strays = []string{
	"cells/c1/ltx/e5000000000/junk",
	"cells/c1/ltx/e1/000000000000000A.ltx",  // upper-case hex
	"cells/c1/ltx/e01/0000000000000003.ltx", // zero-padded epoch
	"cells/c1/ltx/e0/0000000000000003.ltx",  // epoch 0
	"cells/c1/ltx/e1/0000000000000000.ltx",  // txid 0
	"cells/c1/ltx/e1/3.ltx",
	"cells/c1/ltx/announce/7",
	"cells/c1/ltx/notes.txt",
}

// A validly framed file at a non-canonical key (upper-case hex, as in
// e1/000000000000000A.ltx) or any other stranger under the log prefix is
// ignored by reads, barrier reads, restores, fencing walks and GC, and
// reported by a GC dry run.
func TestStrayKeysAreIgnored(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	g := newLedger()
	la := claim(t, m, "a", false)
	logA := open(t, m, la)
	appendN(t, g, logA, la, "a", 2)
	// A well-framed records file claiming txid 10 and position 1, at an
	// upper-case key: taken for txid 10, it would be a start for reads and
	// for the fencing walk, and a chain end right after it.
	body, err := replication.Encode(&replication.File{Kind: replication.KindRecords, Epoch: 1, TxID: 10, Token: la.Token(), Pos: 1, Records: [][]byte{[]byte("stranger")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range strays {
		m.Set(k, body)
	}
	// The same above the chain's head: taken for txid 255, it would be
	// where a new owner's fencing walk starts and seals (at 256).
	high, err := replication.Encode(&replication.File{Kind: replication.KindRecords, Epoch: 1, TxID: 255, Token: la.Token(), Pos: 1, Records: [][]byte{[]byte("stranger")}})
	if err != nil {
		t.Fatal(err)
	}
	const highKey = "cells/c1/ltx/e1/00000000000000FF.ltx"
	m.Set(highKey, high)
	appendN(t, g, logA, la, "x", 49)
	for _, barrier := range []bool{false, true} {
		recs, err := logA.Read(ctx, 0, 0, barrier)
		if err != nil || len(recs) != 51 {
			t.Fatalf("log read (barrier %v): %d records, %v; want 51", barrier, len(recs), err)
		}
	}
	if recs, err := replication.Read(ctx, m, cell, 0, 0); err != nil || len(recs) != 51 {
		t.Fatalf("read: %d records, %v; want 51", len(recs), err)
	}
	if _, err := logA.Snapshot(ctx, la, 20, []byte("s")); err != nil {
		t.Fatal(err)
	}
	lb := claim(t, m, "b", true)
	logB := open(t, m, lb)
	if h := logB.Start(); h.Next != 52 || h.NextPos != 52 {
		t.Fatalf("b starts at %+v, want slot 52 position 52", h)
	}
	appendN(t, g, logB, lb, "b", 1)
	recs := g.check(t, m)
	if len(recs) != 52 {
		t.Fatalf("read %d records", len(recs))
	}
	dry, err := replication.GC(ctx, m, cell, replication.GCOptions{DryRun: true, DropKeyWindow: true})
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(append([]string{highKey}, strays...)))
	if !slices.Equal(dry.Strays, want) {
		t.Fatalf("dry run strays\n%q\nwant\n%q", dry.Strays, want)
	}
	if _, err := replication.GC(ctx, m, cell, replication.GCOptions{DropKeyWindow: true}); err != nil {
		t.Fatal(err)
	}
	for _, k := range strays {
		if _, ok := m.Bytes(k); !ok {
			t.Fatalf("gc deleted the stray %s", k)
		}
	}
}

// An epoch near 2^63 costs a new owner what epoch 2 does: it never walks
// or tombstones the epochs in between.
func TestOpenAtHugeEpoch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := fakes3.NewMem()
	g := newLedger()
	la := claim(t, m, "a", false)
	logA := open(t, m, la)
	appendN(t, g, logA, la, "a", 2)
	rec := []byte(`{"node":"","epoch":9223372036854775808,"nonce":"x","at_ms":1}`)
	m.Set(owner.CellKey(cell), rec)
	lb := claim(t, m, "b", false)
	if lb.Epoch() != 1<<63+1 {
		t.Fatalf("epoch %d", lb.Epoch())
	}
	before := m.Counts()
	logB, err := replication.Open(ctx, m, lb)
	if err != nil {
		t.Fatal(err)
	}
	defer logB.Close(ctx)
	d := m.Counts().Sub(before)
	if d.Put > 2 || d.List > 1 {
		t.Fatalf("open at epoch 2^63+1 made %d PUTs and %d LISTs", d.Put, d.List)
	}
	appendN(t, g, logB, lb, "b", 1)
	if recs := g.check(t, m); len(recs) != 3 {
		t.Fatalf("read %q", data(recs))
	}
}
