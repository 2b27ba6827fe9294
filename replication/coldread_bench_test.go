package replication_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/s3test"
	"github.com/deedkit/deed/replication"
)

// BenchmarkColdRead20k is a read by a process that does not hold the cell
// (replication.Read: a daemon that is not its holder), of 100 records at
// several depths of a log of 20,000 one-record files, written by one epoch
// or by 50 (each closed by its successor's takeover), and of a log of
// 1,500 files by 50 epochs (listed whole: fewer LISTs than seeking): the requests one
// read costs, LISTs above all (each LIST page holds 1,000 keys). "whole"
// locates the start from a listing of the whole log, as every read did
// before seek; "seek" is the read as it is.
func BenchmarkColdRead20k(b *testing.B) {
	for _, c := range []struct{ files, epochs int }{{20000, 1}, {20000, 50}, {1500, 50}} {
		files, epochs := c.files, c.epochs
		m := fakes3.NewMem()
		ctx := context.Background()
		for e := range epochs {
			l := claim(b, m, fmt.Sprintf("n%d", e), e > 0)
			lg := open(b, m, l)
			for i := range files / epochs {
				if _, err := lg.Append(ctx, l, fmt.Appendf(nil, "r%d-%d", e, i)); err != nil {
					b.Fatal(err)
				}
			}
			if err := lg.Close(ctx); err != nil {
				b.Fatal(err)
			}
		}
		for _, mode := range []string{"whole", "seek"} {
			for _, after := range []replication.Pos{0, replication.Pos(files / 2), replication.Pos(files - 100)} {
				b.Run(fmt.Sprintf("files=%d/epochs=%d/%s/after=%d", files, epochs, mode, after), func(b *testing.B) {
					if mode == "whole" {
						defer replication.SetSeekPage(0)()
					}
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
	}
}

// BenchmarkColdRead20kHTTP is BenchmarkColdRead20k's one-epoch log through
// the real S3 client and the HTTP fake on loopback: what a daemon that is
// not the holder pays per read (request counts as in memory).
func BenchmarkColdRead20kHTTP(b *testing.B) {
	const files = 20000
	bk := s3test.HTTPFake(b).Bucket
	ctx := context.Background()
	l := claim(b, bk, "a", false)
	lg := open(b, bk, l)
	for i := range files {
		if _, err := lg.Append(ctx, l, fmt.Appendf(nil, "r%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	for _, mode := range []string{"whole", "seek"} {
		for _, after := range []replication.Pos{0, files / 2, files - 100} {
			b.Run(fmt.Sprintf("%s/after=%d", mode, after), func(b *testing.B) {
				if mode == "whole" {
					defer replication.SetSeekPage(0)()
				}
				for range b.N {
					recs, err := replication.Read(ctx, bk, cell, after, 100)
					if err != nil || len(recs) != 100 || recs[0].Pos != after+1 {
						b.Fatalf("read after %d: %d records, %v", after, len(recs), err)
					}
				}
			})
		}
	}
}
