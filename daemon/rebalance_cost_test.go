package daemon

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/fakes3"
)

// The rebalancer costs nothing in a steady fleet: once the cells are where
// placement wants them, its rounds (every TTL/3) place no cell at all;
// a join makes it place every held cell once, and a newly claimed cell is
// placed once.
func TestRebalancerPlacesOnlyOnChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		f := newTestFleet()
		const ttl = 3 * time.Second
		a := f.open(t, m, "a", ttl, 1000)
		b := f.open(t, m, "b", ttl, 1000)
		time.Sleep(ttl)
		for _, c := range cellNames(40) {
			if _, err := a.acquire(t.Context(), c, false); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(4 * ttl) // moved where they belong (and handed-in pins ended)
		synctest.Wait()
		before := placements.Load()
		time.Sleep(5 * ttl) // 15 rounds per node
		synctest.Wait()
		if n := placements.Load() - before; n != 0 {
			t.Fatalf("a steady fleet's rebalancers placed %d cells in 15 rounds; want 0", n)
		}
		if _, err := b.acquire(t.Context(), "newcomer", false); err != nil {
			t.Fatal(err)
		}
		before = placements.Load()
		time.Sleep(ttl)
		synctest.Wait()
		if n := placements.Load() - before; n != 1 {
			t.Fatalf("one new cell: %d placements, want 1", n)
		}
		held := a.countLive() + b.countLive()
		before = placements.Load()
		f.open(t, m, "c", ttl, 1000)
		time.Sleep(ttl) // two looks at the new member set, then one round
		synctest.Wait()
		if n := placements.Load() - before; n < int64(held) {
			t.Fatalf("a join: %d placements, want every held cell (%d) placed again", n, held)
		}
	})
}
