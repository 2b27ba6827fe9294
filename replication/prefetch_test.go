package replication_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// A restore of a long chain reads ahead within each epoch: every record
// comes back once and in order across an epoch change (a seal), in far
// fewer round trips than slots, and with at most one window of reads
// wasted past the end of each epoch's chain.
func TestRestoreReadsAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const rtt = 20 * time.Millisecond
		m := fakes3.NewMem()
		g := newLedger()
		la := claim(t, m, "a", false)
		lgA := open(t, m, la)
		appendN(t, g, lgA, la, "a", 200)
		if err := lgA.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lb := claim(t, m, "b", false)
		lgB := open(t, m, lb)
		appendN(t, g, lgB, lb, "b", 200)

		m.Inject(fakes3.Rule{Latency: rtt})
		before := m.Counts()
		start := time.Now()
		var got []string
		if _, err := replication.Restore(ctx, m, cell, nil, func(r replication.Record) error {
			got = append(got, string(r.Data))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		elapsed := time.Since(start)
		if len(got) != 400 {
			t.Fatalf("restored %d records, want 400", len(got))
		}
		for i, d := range got {
			want := fmt.Sprintf("a%d", i)
			if i >= 200 {
				want = fmt.Sprintf("b%d", i-200)
			}
			if d != want {
				t.Fatalf("record %d is %q, want %q", i, d, want)
			}
		}
		// 402 slots to read: 400 records, epoch 1's seal, epoch 2's end.
		gets := m.Counts().Sub(before).Get
		if gets < 402 || gets > 402+2*32 {
			t.Fatalf("%d GETs, want 402 plus at most one window (32) per epoch", gets)
		}
		if rtts := elapsed / rtt; rtts > 60 {
			t.Fatalf("restore took %d round trips, want read-ahead to keep it under 60", rtts)
		}
		g.check(t, m)
	})
}
