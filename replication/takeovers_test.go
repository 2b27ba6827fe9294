package replication_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// simulate runs owners that claim the cell one after another (forced),
// open their logs and append concurrently, with random latency on every
// request and random crashes (every request of a crashed node fails from
// some point on, the first one possibly after it applied). A reader reads
// the chain all along. It returns the first broken promise: an
// acknowledged record missing, a refused one present, a duplicate, a gap,
// or a read that lost what an earlier read showed.
func simulate(t *testing.T, seed uint64, owners, records int) (violation error) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, 1))
		m := fakes3.NewMem()
		g := newLedger()
		var mu sync.Mutex
		fail := func(err error) {
			mu.Lock()
			if violation == nil {
				violation = err
			}
			mu.Unlock()
		}

		var wg sync.WaitGroup
		for i := 0; i < owners; i++ {
			name := fmt.Sprintf("n%d", i)
			r := rand.New(rand.NewPCG(seed, uint64(i)+2)) // used under the fake's lock only
			delay := time.Duration(rng.IntN(30)) * time.Millisecond
			crashAt, crashAfter := 0, rng.IntN(2) == 0
			if rng.IntN(3) == 0 {
				crashAt = 1 + rng.IntN(25)
			}
			closeAtEnd := rng.IntN(2) == 0
			ctx, cancel := context.WithCancel(context.Background())
			n := 0
			m.Inject(fakes3.Rule{Client: name, Fault: fakes3.ErrAfter, Match: func(fakes3.Op, string) bool {
				n++
				if n == crashAt {
					cancel()
					return crashAfter
				}
				return false
			}})
			m.Inject(fakes3.Rule{Client: name, Fault: fakes3.ErrBefore, Match: func(fakes3.Op, string) bool {
				return crashAt > 0 && n >= crashAt
			}})
			for _, d := range []time.Duration{1, 2, 4, 8} {
				m.Inject(fakes3.Rule{Client: name, Latency: d * time.Millisecond, Match: func(fakes3.Op, string) bool { return r.IntN(2) == 0 }})
			}
			wg.Go(func() {
				defer cancel()
				b := m.Client(name)
				time.Sleep(delay)
				node, err := owner.NewNode(b, owner.Config{Name: name})
				if err != nil {
					fail(err)
					return
				}
				l, err := node.Claim(ctx, cell, owner.ClaimOptions{Force: true})
				if err != nil {
					return
				}
				lg, err := replication.Open(ctx, b, l, replication.WithRequestTimeout(50*time.Millisecond))
				if err != nil {
					if c := errcode.CodeOf(err); c == errcode.CodeCorruptTx || c == errcode.CodeNotHolder {
						fail(fmt.Errorf("open %s: %w", name, err))
					}
					return
				}
				defer lg.Close(ctx)
				var awg sync.WaitGroup
				for k := 0; k < records; k++ {
					awg.Go(func() {
						err := g.append(ctx, lg, l, fmt.Sprintf("%s-%d", name, k))
						if c := errcode.CodeOf(err); c == errcode.CodeCorruptTx || c == errcode.CodeNotHolder {
							fail(fmt.Errorf("append %s: %w", name, err))
						}
					})
					time.Sleep(time.Millisecond)
				}
				awg.Wait()
				if closeAtEnd {
					_ = lg.Close(ctx)
				}
			})
		}

		done := make(chan struct{})
		var rwg sync.WaitGroup
		rwg.Go(func() {
			var shown []string
			for {
				select {
				case <-done:
					return
				case <-time.After(3 * time.Millisecond):
				}
				recs, err := replication.Read(context.Background(), m.Client("reader"), cell, 0, 0)
				if err != nil {
					fail(fmt.Errorf("read: %w", err))
					return
				}
				got := data(recs)
				if len(got) < len(shown) || !slices.Equal(got[:len(shown)], shown) {
					fail(fmt.Errorf("a read lost what an earlier one showed: %q then %q", shown, got))
					return
				}
				shown = got
			}
		})
		wg.Wait()
		close(done)
		rwg.Wait()
		if _, err := g.verify(m); err != nil {
			fail(err)
		}
	})
	return violation
}

func TestRacingTakeoversKeepAcknowledgedRecords(t *testing.T) {
	runs := 300
	if testing.Short() {
		runs = 50
	}
	for seed := uint64(0); seed < uint64(runs); seed++ {
		if err := simulate(t, seed, 4, 3); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}
