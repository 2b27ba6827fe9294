package replication_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// BenchmarkOpenAfterGap measures what a new owner's Open and a Restore
// cost after an epoch gap of lock-only claims (they write nothing under
// the log prefix): the requests must not grow with the gap. A gap of 10
// is claimed for real; larger gaps set the ownership record's epoch as
// lock-only claims would have left it.
func BenchmarkOpenAfterGap(b *testing.B) {
	for _, gap := range []uint64{10, 1000, 1e9} {
		b.Run(fmt.Sprintf("gap=%d", gap), func(b *testing.B) {
			ctx := context.Background()
			var openReq, restoreReq int64
			for b.Loop() {
				b.StopTimer()
				m := fakes3.NewMem()
				g := newLedger()
				la := claim(b, m, "a", false)
				logA := open(b, m, la)
				appendN(b, g, logA, la, "a", 3)
				if gap <= 10 {
					for range gap {
						if err := claim(b, m, "lock", true).Release(ctx); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					m.Set(owner.CellKey(cell), fmt.Appendf(nil, `{"node":"","epoch":%d,"nonce":"n","at_ms":1}`, 1+gap))
				}
				lb := claim(b, m, "b", false)
				before := m.Counts()
				b.StartTimer()
				logB, err := replication.Open(ctx, m, lb)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				openReq = m.Counts().Sub(before).Total()
				appendN(b, g, logB, lb, "b", 1)
				before = m.Counts()
				b.StartTimer()
				if _, err := replication.Restore(ctx, m, cell, nil, nil); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				restoreReq = m.Counts().Sub(before).Total()
				_ = logB.Close(ctx)
				b.StartTimer()
			}
			b.ReportMetric(float64(openReq), "open-requests")
			b.ReportMetric(float64(restoreReq), "restore-requests")
		})
	}
}
