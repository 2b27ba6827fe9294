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
