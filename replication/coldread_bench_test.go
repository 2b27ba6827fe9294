package replication_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// BenchmarkColdRead20k is a read by a process that does not hold the cell
// (replication.Read: a daemon that is not its holder), of 100 records at
// several depths of a log of 20,000 one-record files: the requests one
// read costs, LISTs above all (each LIST page holds 1,000 keys).
func BenchmarkColdRead20k(b *testing.B) {
	const files = 20000
	m := fakes3.NewMem()
	l := claim(b, m, "a", false)
	lg := open(b, m, l)
	ctx := context.Background()
	for i := range files {
		if _, err := lg.Append(ctx, l, fmt.Appendf(nil, "r%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	for _, after := range []replication.Pos{0, files / 2, files - 100} {
		b.Run(fmt.Sprintf("after=%d", after), func(b *testing.B) {
			before := m.Counts()
			for range b.N {
				recs, err := replication.Read(ctx, m, cell, after, 100)
				if err != nil || len(recs) != 100 || recs[0].Pos != after+1 {
					b.Fatalf("read after %d: %d records, %v", after, len(recs), err)
				}
			}
			c := m.Counts().Sub(before)
			n := float64(b.N)
			b.ReportMetric(float64(c.List)/n, "lists/op")
			b.ReportMetric(float64(c.Get)/n, "gets/op")
			b.ReportMetric(float64(c.Head)/n, "heads/op")
		})
	}
}
