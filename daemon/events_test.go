package daemon

import (
	"fmt"
	"testing"
)

func TestEventRingKeepsTheNewestFirst(t *testing.T) {
	var r eventRing
	if got := r.recent(); len(got) != 0 {
		t.Fatalf("empty ring returned %v", got)
	}
	for i := range maxEvents + 5 {
		r.add(Event{Kind: "move", Cell: fmt.Sprint(i)})
	}
	got := r.recent()
	if len(got) != maxEvents {
		t.Fatalf("kept %d events, want %d", len(got), maxEvents)
	}
	if got[0].Cell != fmt.Sprint(maxEvents+4) || got[maxEvents-1].Cell != "5" {
		t.Fatalf("order: first %s last %s", got[0].Cell, got[maxEvents-1].Cell)
	}
	if got[0].At.IsZero() {
		t.Fatal("event not stamped")
	}
}
