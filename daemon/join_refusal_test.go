package daemon

import (
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/fakes3"
)

// A 4th node joins a fleet of three holding many cells, and a quarter of
// them move to it at the move rate, while clients send appends, one
// attempt each, to random cells through random nodes (the joiner too, once
// it serves): a join is a planned operation, so every append is answered
// 200. Virtual time (synctest); DEED_JOIN_CELLS sets the number of cells
// (default 500, about 3 s of virtual moves at the default rate; 30000 for the
// size at which a refusal was once seen, a few minutes of CPU).
func TestJoinRefusesNoAppend(t *testing.T) {
	n := 500
	if v := os.Getenv("DEED_JOIN_CELLS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("DEED_JOIN_CELLS=%q: want a positive number", v)
		}
	}
	if testing.Short() && n > 500 {
		t.Skip("a large join: not with -short")
	}
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		f := newTestFleet()
		const ttl = 3 * time.Second
		ds := []*Daemon{f.open(t, m, "n1", ttl, 0), f.open(t, m, "n2", ttl, 0), f.open(t, m, "n3", ttl, 0)}
		time.Sleep(ttl)
		cells := make([]string, n)
		for i := range cells {
			cells[i] = fmt.Sprintf("j-%05d", i)
		}
		for i, c := range cells {
			if _, status, path := f.appendFollowing(t, ds[i%3].cfg.Node, c, "first"); status != 200 {
				t.Fatalf("append to %s: %v", c, path)
			}
		}
		time.Sleep(2 * ttl) // each cell on its preferred node of three
		synctest.Wait()

		var mu sync.Mutex
		nodes := []string{"n1", "n2", "n3"}
		sent := 0
		refused := map[string]int{}
		var samples []string
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 1))
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					mu.Lock()
					node := nodes[rng.IntN(len(nodes))]
					mu.Unlock()
					cell := cells[rng.IntN(len(cells))]
					rec := httptest.NewRecorder()
					f.handler(node).ServeHTTP(rec, httptest.NewRequest("POST", "http://127.0.0.1/v1/cells/"+cell+"/append", strings.NewReader(fmt.Sprintf("w%d-%d", w, i))))
					mu.Lock()
					sent++
					if rec.Code != 200 {
						var body client.ErrorBody
						decodeJSON(t, rec, &body)
						k := fmt.Sprintf("%d %s applied %s", rec.Code, body.Code, body.Applied)
						refused[k]++
						if len(samples) < 10 {
							samples = append(samples, fmt.Sprintf("%s via %s: %s", cell, node, body.Error))
						}
					}
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
		time.Sleep(time.Second)
		joined := time.Now()
		ds = append(ds, f.open(t, m, "n4", ttl, 0))
		mu.Lock()
		nodes = append(nodes, "n4")
		mu.Unlock()
		// The joiner's share moves at DefaultMoveRate once its lease has
		// been seen twice; then a little longer.
		time.Sleep(time.Duration(float64(n)/4/DefaultMoveRate*float64(time.Second)) + 4*ttl)
		close(stop)
		wg.Wait()
		synctest.Wait()
		moved := 0
		for _, e := range ds[3].events.recent() {
			if e.Kind == "move" {
				moved++
			}
		}
		held := heldBy(cells, ds...)
		onN4 := 0
		for _, c := range cells {
			if held[c] == "n4" {
				onN4++
			}
		}
		var ks []string
		for k, v := range refused {
			ks = append(ks, fmt.Sprintf("%s ×%d", k, v))
		}
		slices.Sort(ks)
		t.Logf("%d cells, the joiner holds %d %v after joining (%d moves in its recent events); %d appends sent meanwhile, refused: %v",
			n, onN4, time.Since(joined), moved, sent, ks)
		for _, s := range samples {
			t.Errorf("refused during a join: %s", s)
		}
	})
}
