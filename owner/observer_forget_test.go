package owner

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
)

// Leases that vanish from the bucket (a finished deed exec deletes its
// own) are forgotten TTL+margin after the LIST that missed them, so an
// observer's map holds about the leases in the bucket, not every node
// it ever saw; a forgotten node still reads as missing (dead) when asked.
func TestObserverForgetsVanishedLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		b := m.Client("o")
		p := Params{TTL: 3 * time.Second, Margin: time.Second}
		o := NewObserver(b, p)
		ctx := t.Context()
		keep := NodeKey("daemon")
		if _, err := b.Put(ctx, keep, []byte(`{}`), bucket.None); err != nil {
			t.Fatal(err)
		}
		size := func() int {
			o.mu.Lock()
			defer o.mu.Unlock()
			return len(o.obs)
		}
		most := 0
		for round := range 10 {
			// 20 execs come and go within one TTL.
			for i := range 20 {
				key := NodeKey(fmt.Sprintf("exec-%d-%d", round, i))
				if _, err := b.Put(ctx, key, []byte(`{}`), bucket.None); err != nil {
					t.Fatal(err)
				}
			}
			if err := o.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			most = max(most, size())
			for i := range 20 {
				if err := b.Delete(ctx, NodeKey(fmt.Sprintf("exec-%d-%d", round, i)), bucket.None); err != nil {
					t.Fatal(err)
				}
			}
			// The daemon's cadence: a LIST every TTL/3.
			for range 3 {
				time.Sleep(p.TTL / 3)
				if err := o.Refresh(ctx); err != nil {
					t.Fatal(err)
				}
				most = max(most, size())
			}
		}
		for range 6 {
			time.Sleep(p.TTL / 3)
			if err := o.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := size(); n != 1 {
			t.Errorf("after the execs: %d observations, want 1 (the daemon's lease)", n)
		}
		// At most two rounds' worth at once: the current one and the
		// previous, not yet past TTL+margin.
		if most > 1+2*20 {
			t.Errorf("the map grew to %d observations for 200 execs, want at most %d", most, 1+2*20)
		}
		ob, err := o.Observe(ctx, "exec-0-0")
		if err != nil || ob.Exists || Alive(ob, time.Now(), p) {
			t.Errorf("a forgotten node reads as %+v, %v: want missing, dead", ob, err)
		}
	})
}
