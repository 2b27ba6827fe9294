package fakes3

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The key index agrees with a sorted copy of a map through random inserts
// and deletes, across many chunk splits and removals.
func TestKeyIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var x keyIndex
	set := map[string]bool{}
	for step := range 20000 {
		k := fmt.Sprintf("k/%04d", r.IntN(3000))
		if set[k] && r.IntN(3) == 0 {
			delete(set, k)
			x.remove(k)
		} else if !set[k] {
			set[k] = true
			x.insert(k)
		}
		x.remove("absent") // a no-op
		if step%997 != 0 {
			continue
		}
		want := make([]string, 0, len(set))
		for k := range set {
			want = append(want, k)
		}
		slices.Sort(want)
		from := fmt.Sprintf("k/%04d", r.IntN(3000))
		var got []string
		x.ascend(from, func(k string) bool { got = append(got, k); return true })
		i, _ := slices.BinarySearch(want, from)
		if !slices.Equal(got, want[i:]) {
			t.Fatalf("step %d: ascend(%q) = %d keys, want %d", step, from, len(got), len(want[i:]))
		}
		for _, c := range x.chunks {
			if len(c) == 0 || len(c) > maxChunk {
				t.Fatalf("chunk of %d keys", len(c))
			}
		}
	}
	var stopped []string
	x.ascend("", func(k string) bool { stopped = append(stopped, k); return len(stopped) < 3 })
	if len(stopped) != 3 || !strings.HasPrefix(stopped[0], "k/") {
		t.Fatalf("ascend did not stop: %q", stopped)
	}
}
