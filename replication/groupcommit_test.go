package replication_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// 64 concurrent appenders against a store with 20 ms of write latency:
// every record is acknowledged, read back exactly once, in an order that
// keeps each appender's own order, at the position it was acknowledged at;
// and group commit keeps the PUTs per record far below one.
func TestGroupCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const writers, each = 64, 20
		ctx := context.Background()
		m := fakes3.NewMem()
		m.Inject(fakes3.Rule{Op: fakes3.OpPut, KeyPrefix: replication.LogPrefix(cell), Latency: 20 * time.Millisecond})
		la := claim(t, m, "a", false)
		lg := open(t, m, la)
		g := newLedger()
		before := m.Counts()
		start := time.Now()
		var wg sync.WaitGroup
		for w := 0; w < writers; w++ {
			wg.Go(func() {
				for i := 0; i < each; i++ {
					if err := g.append(ctx, lg, la, fmt.Sprintf("w%02d-%03d", w, i)); err != nil {
						t.Errorf("append: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		puts := m.Counts().Sub(before).Put
		recs := g.check(t, m)
		if len(recs) != writers*each {
			t.Fatalf("read %d records, want %d", len(recs), writers*each)
		}
		last := map[string]int{}
		for _, r := range recs {
			var w, i int
			fmt.Sscanf(string(r.Data), "w%d-%d", &w, &i)
			k := fmt.Sprint(w)
			if prev, ok := last[k]; ok && i != prev+1 {
				t.Fatalf("writer %d: record %d read after %d", w, i, prev)
			}
			last[k] = i
		}
		ratio := float64(puts) / float64(writers*each)
		t.Logf("%d records in %d PUTs (%.3f PUTs/record), %v of virtual time", writers*each, puts, ratio, elapsed)
		if ratio > 0.1 {
			t.Fatalf("%.3f PUTs per record, want ≤ 0.1", ratio)
		}
	})
}

// Group commit respects its bounds: with at most 5 records per file, no
// file carries more.
func TestGroupCommitBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := fakes3.NewMem()
		m.Inject(fakes3.Rule{Op: fakes3.OpPut, Latency: 20 * time.Millisecond})
		la := claim(t, m, "a", false)
		lg := open(t, m, la, replication.WithMaxBatch(5, 1<<20))
		var wg sync.WaitGroup
		var maxCount atomic.Int64
		for w := 0; w < 32; w++ {
			wg.Go(func() {
				res, err := lg.Append(ctx, la, []byte("x"))
				if err != nil {
					t.Error(err)
				}
				for {
					c := maxCount.Load()
					if int64(res.Count) <= c || maxCount.CompareAndSwap(c, int64(res.Count)) {
						break
					}
				}
			})
		}
		wg.Wait()
		if c := maxCount.Load(); c != 5 {
			t.Fatalf("largest group commit %d records, want 5", c)
		}
	})
}
