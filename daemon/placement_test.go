package daemon

import (
	"fmt"
	"testing"

	"github.com/deedkit/deed/owner"
)

func TestPreferredSpreadsByWeight(t *testing.T) {
	ms := []member{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}, {Name: "c", Weight: 2}}
	count := map[string]int{}
	const cells = 20000
	for i := range cells {
		m, ok := preferred(fmt.Sprintf("cell-%d", i), ms)
		if !ok {
			t.Fatal("no member chosen")
		}
		count[m.Name]++
	}
	// Expected shares 1/4, 1/4, 1/2; allow ±2 percentage points.
	for name, want := range map[string]float64{"a": 0.25, "b": 0.25, "c": 0.5} {
		got := float64(count[name]) / cells
		if got < want-0.02 || got > want+0.02 {
			t.Errorf("node %s: share %.3f, want %.2f±0.02 (counts %v)", name, got, want, count)
		}
	}
}

func TestPreferredMovesOnlyTheJoinersShare(t *testing.T) {
	three := []member{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}, {Name: "c", Weight: 1}}
	four := append([]member{{Name: "d", Weight: 1}}, three...) // order must not matter
	const cells = 20000
	moved := 0
	for i := range cells {
		cell := fmt.Sprintf("cell-%d", i)
		before, _ := preferred(cell, three)
		after, _ := preferred(cell, four)
		if before.Name != after.Name {
			if after.Name != "d" {
				t.Fatalf("cell %s moved from %s to %s, not to the joiner", cell, before.Name, after.Name)
			}
			moved++
		}
	}
	if share := float64(moved) / cells; share < 0.23 || share > 0.27 {
		t.Errorf("joiner took %.3f of the cells, want about 1/4", share)
	}
}

func TestPreferredEmpty(t *testing.T) {
	if _, ok := preferred("x", nil); ok {
		t.Fatal("a member was chosen from none")
	}
}

func TestLiveMembersLeavesOutDrainingDeadAndCorrupt(t *testing.T) {
	view := []owner.NodeView{
		{Node: "ok", Addr: "http://ok", Alive: true, Exists: true, Weight: 2},
		{Node: "dead", Addr: "http://dead", Alive: false, Exists: true},
		{Node: "draining", Addr: "http://dr", Alive: true, Exists: true, Draining: true},
		{Node: "corrupt", Addr: "http://c", Alive: true, Exists: true, Corrupt: "DEED-E030"},
		{Node: "noaddr", Alive: true, Exists: true},
		{Node: "unweighted", Addr: "http://u", Alive: true, Exists: true},
	}
	got := liveMembers(view, false)
	want := []member{{Name: "ok", Addr: "http://ok", Weight: 2}, {Name: "unweighted", Addr: "http://u", Weight: 1}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("liveMembers = %v, want %v", got, want)
	}
	// With a fleet secret only verified leases are members.
	view[0].Verified = true
	got = liveMembers(view, true)
	want = []member{{Name: "ok", Addr: "http://ok", Weight: 2}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("liveMembers verifying = %v, want %v", got, want)
	}
}
