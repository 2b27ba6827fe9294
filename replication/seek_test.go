package replication_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// randomLog writes a log of many epochs on m: each epoch claims by force,
// and either only announces (and never writes), or writes some records —
// several at once, so that files carry one to three — and maybe a
// snapshot, then closes (a seal) or is abandoned (its successor seals it);
// GC runs now and then. It returns the position the next record gets.
func randomLog(t *testing.T, rng *rand.Rand, m *fakes3.Mem) replication.Pos {
	t.Helper()
	ctx := context.Background()
	var next replication.Pos = 1
	for e := range 3 + rng.IntN(10) {
		l := claim(t, m, fmt.Sprintf("n%d", e), true)
		if rng.IntN(6) == 0 {
			if err := replication.Announce(ctx, m, l); err != nil {
				t.Fatal(err)
			}
			continue
		}
		lg := open(t, m, l)
		for n := rng.IntN(25); n > 0; {
			k := min(n, 1+rng.IntN(3))
			var wg sync.WaitGroup
			for j := range k {
				wg.Go(func() {
					if _, err := lg.Append(ctx, l, fmt.Appendf(nil, "e%d-%d-%d", e, n, j)); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			n -= k
		}
		if t.Failed() {
			t.FailNow()
		}
		h := lg.Head()
		next = h.NextPos
		if rng.IntN(3) == 0 && h.Next > lg.Start().Next {
			if _, err := lg.Snapshot(ctx, l, h.Next-1-replication.TxID(rng.IntN(int(h.Next-lg.Start().Next))), []byte("state")); err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(2) == 0 {
			if err := lg.Close(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			lg.Abandon()
		}
		if rng.IntN(3) == 0 {
			if _, err := replication.GC(ctx, m, cell, replication.GCOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return next
}

// outcome is what a read answered, in a comparable form.
type outcome struct {
	recs      []replication.Record
	code      errcode.Code
	compacted bool
}

func (o outcome) String() string {
	if o.code != "" {
		return fmt.Sprintf("%s (compacted %t)", o.code, o.compacted)
	}
	var ps []string
	for _, r := range o.recs {
		ps = append(ps, fmt.Sprintf("%d:e%d/%d:%s", r.Pos, r.Epoch, r.TxID, r.Data))
	}
	return fmt.Sprint(ps)
}

func readOutcome(b bucket.Bucket, after replication.Pos, limit int) outcome {
	recs, err := replication.Read(context.Background(), b, cell, after, limit)
	if err != nil {
		return outcome{code: errcode.CodeOf(err), compacted: errors.Is(err, replication.ErrCompacted)}
	}
	return outcome{recs: recs}
}

func sameOutcome(a, b outcome) bool {
	return a.code == b.code && a.compacted == b.compacted && slices.EqualFunc(a.recs, b.recs, func(x, y replication.Record) bool {
		return x.Pos == y.Pos && x.Epoch == y.Epoch && x.TxID == y.TxID && string(x.Data) == string(y.Data)
	})
}

// TestSeekReadEqualsWholeListing: on random logs of many epochs, with
// snapshots, epochs that never wrote, and prefixes GC deleted, a read that
// seeks (the first page listed holds 4 keys, so every log is "long")
// answers exactly as one that lists the whole log, at every position and
// for several limits, errors included.
func TestSeekReadEqualsWholeListing(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 22))
			m := fakes3.NewMem()
			next := randomLog(t, rng, m)
			sought := 0
			for after := replication.Pos(0); after <= next+1; after++ {
				for _, limit := range []int{1, 3, 0} {
					restore := replication.SetSeekPage(0)
					want := readOutcome(m, after, limit)
					restore()
					restore = replication.SetSeekPage(4)
					got := readOutcome(m, after, limit)
					restore()
					if !sameOutcome(got, want) {
						t.Fatalf("read after %d limit %d:\nseek  %v\nwhole %v", after, limit, got, want)
					}
					if got.code == "" {
						sought++
					}
				}
			}
			if sought == 0 {
				t.Fatal("no read returned records")
			}
		})
	}
}
