package replication_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/benchtest"
	"github.com/deedkit/deed/replication"
)

// BenchmarkKeyedAppend: one appender on a held cell, one record at a time,
// with and without an idempotency key (a fresh one per append, as the Go
// client sends). The target: a keyed append costs no request and no round
// trip more than an unkeyed one (the key rides in the slot's PUT).
func BenchmarkKeyedAppend(b *testing.B) {
	for _, rtt := range benchtest.RTTs {
		for _, keyed := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/keyed=%v", benchtest.Name(rtt), keyed), func(b *testing.B) {
				benchtest.Run(b, rtt, func(t testing.TB) {
					ctx := context.Background()
					m := fakes3.NewMem()
					la := claim(t, m, "a", false)
					lg := open(t, m, la)
					rec := make([]byte, 100)
					if keyed { // the first keyed append of a log learns the (empty) window
						if _, err := lg.AppendWith(ctx, la, rec, replication.AppendOptions{Key: "warm"}); err != nil {
							t.Fatal(err)
						}
					}
					m.Inject(fakes3.Rule{Latency: rtt})
					before := m.Counts()
					var total time.Duration
					for i := 0; i < b.N; i++ {
						var opts replication.AppendOptions
						if keyed {
							opts.Key = fmt.Sprintf("key-%d", i)
						}
						start := time.Now()
						if _, err := lg.AppendWith(ctx, la, rec, opts); err != nil {
							t.Fatal(err)
						}
						total += time.Since(start)
					}
					c := m.Counts().Sub(before)
					b.ReportMetric(float64(c.Total())/float64(b.N), "req/append")
					if rtt > 0 {
						b.ReportMetric(benchtest.Ratio(total/time.Duration(b.N), rtt), "RTT/append")
					}
				})
			})
		}
	}
}

// BenchmarkKeyWindowRebuild: what a new owner reads to learn the keys of
// its predecessors' window, for 1,000 and 100,000 keys, written one key per
// transaction file (the worst case: one appender at a time) and 100 per
// file (group commits of concurrent appenders). One LIST (its pages: 1,000
// keys each in S3's and the fake's listing) and the window's record files,
// 64 GETs at a time.
func BenchmarkKeyWindowRebuild(b *testing.B) {
	for _, keys := range []int{1000, 100_000} {
		for _, perFile := range []int{1, 100} {
			b.Run(fmt.Sprintf("keys=%d/per-file=%d", keys, perFile), func(b *testing.B) {
				const rtt = 20 * time.Millisecond
				benchtest.Bubble(b, func(t *testing.T) {
					ctx := context.Background()
					m := fakes3.NewMem()
					la := claim(t, m, "a", false)
					a, err := replication.Open(ctx, m, la)
					if err != nil {
						t.Fatal(err)
					}
					// The predecessor's files, written directly (as its group
					// commits would be), then its seal by Close.
					h := a.Head()
					files := keys / perFile
					ts := time.Now().UnixMilli()
					for f := range files {
						recs := make([][]byte, perFile)
						var tk []replication.TxKey
						for i := range recs {
							recs[i] = make([]byte, 100)
							tk = append(tk, replication.TxKey{Key: fmt.Sprintf("k%d.%d", f, i), First: i, Count: 1})
						}
						txid := h.Next + replication.TxID(f)
						body, err := replication.Encode(&replication.File{Kind: replication.KindRecords, Epoch: la.Epoch(), TxID: txid, Token: la.Token(),
							Pos: h.NextPos + replication.Pos(f*perFile), TS: ts, Records: recs, Keys: tk})
						if err != nil {
							t.Fatal(err)
						}
						if _, err := m.Put(ctx, replication.SlotKey(cell, la.Epoch(), txid), body, bucket.IfAbsent); err != nil {
							t.Fatal(err)
						}
					}
					a.Abandon()
					lb := claim(t, m, "b", true)
					lg := open(t, m, lb)
					m.Inject(fakes3.Rule{Latency: rtt})
					var st replication.RebuildStats
					before := m.Counts()
					start := time.Now()
					for i := 0; i < b.N; i++ {
						if st, err = lg.RebuildKeys(ctx); err != nil {
							t.Fatal(err)
						}
					}
					elapsed := time.Since(start) / time.Duration(b.N)
					c := m.Counts().Sub(before)
					if st.Keys != keys {
						t.Fatalf("learned %d keys, want %d", st.Keys, keys)
					}
					b.ReportMetric(float64(c.List)/float64(b.N), "LIST-pages")
					b.ReportMetric(float64(c.Get)/float64(b.N), "GETs")
					b.ReportMetric(benchtest.Ratio(elapsed, rtt), "RTT/rebuild")
				})
			})
		}
	}
}
