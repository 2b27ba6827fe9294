package replication_test

import (
	"context"
	"testing"
	"time"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/benchtest"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// restoreTxns is the length of the log BenchmarkRestore restores.
const restoreTxns = 10_000

// BenchmarkRestoreAfterGC measures a full restore (replication.Restore: the
// newest snapshot, then every record after it) of a cell whose log holds
// 10,000 one-record transactions and is sealed, in a synctest bubble
// over a store that answers every request after 20 ms: requests/op counts
// the requests on cells/ keys, rtt/op the latency over the RTT, exact in
// virtual time. The rows:
//
//   - no-snapshot: the whole log is read;
//   - snapshot: a snapshot covers the first 9,990 transactions;
//   - snapshot+gc: the same, and GC deleted what it covers (a trim below
//     the snapshot's successor, with the epoch sealed, deletes the same).
//
// Building the log is not measured.
func BenchmarkRestoreAfterGC(b *testing.B) {
	for _, row := range []string{"no-snapshot", "snapshot", "snapshot+gc"} {
		b.Run(row, func(b *testing.B) {
			benchtest.Bubble(b, func(t *testing.T) {
				var reqs int64
				var elapsed time.Duration
				for range b.N {
					n, d := restoreOnce(t, row)
					reqs += n
					elapsed += d
				}
				b.ReportMetric(float64(reqs)/float64(b.N), "requests/op")
				b.ReportMetric(benchtest.Ratio(elapsed/time.Duration(b.N), firstAppendRTT), "rtt/op")
			})
		})
	}
}

func restoreOnce(t *testing.T, row string) (int64, time.Duration) {
	ctx := context.Background()
	m := fakes3.NewMem()
	n, err := owner.NewNode(m, owner.Config{Name: "w", Addr: "http://w"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer closeNode(t, n)
	l, err := n.Claim(ctx, cell, owner.ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lg, err := replication.Open(ctx, m, l)
	if err != nil {
		t.Fatal(err)
	}
	for range restoreTxns {
		if _, err := lg.Append(ctx, l, []byte("record")); err != nil {
			t.Fatal(err)
		}
	}
	if row != "no-snapshot" {
		if _, err := lg.Snapshot(ctx, l, restoreTxns-10, []byte("state")); err != nil {
			t.Fatal(err)
		}
	}
	if err := lg.Close(ctx); err != nil { // its seal: the epoch is sealed
		t.Fatal(err)
	}
	if row == "snapshot+gc" {
		if _, err := replication.GC(ctx, m, cell, replication.GCOptions{DropKeyWindow: true}); err != nil {
			t.Fatal(err)
		}
	}
	m.Inject(fakes3.Rule{Latency: firstAppendRTT})
	counted := &benchtest.Counted{B: m, Prefix: "cells/"}
	recs := 0
	start := time.Now()
	if _, err := replication.Restore(ctx, counted, cell, func(replication.Snapshot) error { return nil },
		func(replication.Record) error { recs++; return nil }); err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	if want := map[string]int{"no-snapshot": restoreTxns, "snapshot": 10, "snapshot+gc": 10}[row]; recs != want {
		t.Fatalf("%s: restored %d records, want %d", row, recs, want)
	}
	c := counted.Counts()
	return c.Get + c.Head + c.Put + c.Delete + c.List, d
}
