package owner

import (
	"fmt"
	"testing"

	"github.com/deedkit/deed/fakes3"
)

// The node's memory of cells it released stays bounded however many pass
// through it, and a cell it holds is not kept twice.
func TestHintsAreBounded(t *testing.T) {
	n, err := NewNode(fakes3.NewMem(), Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxHints + 100 {
		l, err := n.Claim(t.Context(), fmt.Sprintf("c%d", i), ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.mu.Lock()
		_, kept := n.hints.cells[l.cell]
		n.mu.Unlock()
		if kept {
			t.Fatalf("hint kept for held cell %s", l.cell)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.hints.cells) != maxHints {
		t.Fatalf("%d hints, want the bound %d", len(n.hints.cells), maxHints)
	}
}

// A node's memory that its own seal landed (Hint.own) is never taken from
// a peer nor handed to one: a peer's end is read before it is trusted.
func TestOwnSealMemoryStaysOnTheNode(t *testing.T) {
	n, err := NewNode(fakes3.NewMem(), Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	h := Hint{Known: true, ReleasedETag: "x", Epoch: 1, End: &End{TxID: 2, Pos: 2}, own: true, ts: 5}
	n.NoteHint("c", h)
	if got := n.hints.get("c"); got.own || got.ts != 0 {
		t.Fatalf("a peer's hint was noted as this node's own seal: %+v", got)
	}
	n.mu.Lock()
	n.hints.note("d", h, false)
	n.mu.Unlock()
	if got, ok := n.ReleasedHint("d"); !ok || got.own || got.ts != 0 {
		t.Fatalf("the hint handed out carries this node's own seal: %+v %v", got, ok)
	}
}

// The seal a claim reads with its PUT is at the key the log writes it to
// (docs/design.md, "Bucket layout": the epoch in decimal, the txid in 16
// lower-case hex digits).
func TestSealKeyIsTheLogsSlotKey(t *testing.T) {
	if got, want := sealKey("c1", 12, 0xab), "cells/c1/ltx/e12/00000000000000ab.ltx"; got != want {
		t.Fatalf("sealKey = %q, want %q", got, want)
	}
}
