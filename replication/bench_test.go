package replication_test

// Benchmarks of the data path against the limits S3 round trips set. Each
// runs with no injected latency (the CPU cost of deed) and with 20 ms per
// request inside a synctest bubble, where latencies divided by the RTT
// count round trips exactly. They report ratios as custom metrics; run them
// with `make bench`. See docs/performance.md.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/benchtest"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// BenchmarkAppendLatency: one appender, one record at a time (low load).
// The acknowledgement waits for exactly one PUT, so RTT/append is 1.
func BenchmarkAppendLatency(b *testing.B) {
	for _, rtt := range benchtest.RTTs {
		b.Run(benchtest.Name(rtt), func(b *testing.B) {
			benchtest.Run(b, rtt, func(t testing.TB) {
				ctx := context.Background()
				m := fakes3.NewMem()
				la := claim(t, m, "a", false)
				lg := open(t, m, la)
				m.Inject(fakes3.Rule{Latency: rtt})
				rec := make([]byte, 100)
				before := m.Counts()
				var total time.Duration
				for i := 0; i < b.N; i++ {
					start := time.Now()
					if _, err := lg.Append(ctx, la, rec); err != nil {
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

// BenchmarkAppendRate: an open-loop load of 1,000 appends/s on one cell,
// each from its own goroutine. Group commit puts the records that arrive
// while a PUT is in flight into the next file, so PUTs per record fall to
// about 1/(rate×RTT) = 0.05 at 20 ms; an acknowledgement then waits for
// the rest of the PUT in flight plus its own (1.5 RTT on average, at most
// 2).
func BenchmarkAppendRate(b *testing.B) {
	const rate = 1000 // appends per second
	for _, rtt := range benchtest.RTTs {
		b.Run(fmt.Sprintf("rate=%d/%s", rate, benchtest.Name(rtt)), func(b *testing.B) {
			// Always in a bubble: the arrivals are paced in virtual time.
			benchtest.Bubble(b, func(t *testing.T) {
				ctx := context.Background()
				m := fakes3.NewMem()
				la := claim(t, m, "a", false)
				lg := open(t, m, la)
				m.Inject(fakes3.Rule{Latency: rtt})
				rec := make([]byte, 100)
				lat := make([]time.Duration, b.N)
				before := m.Counts()
				var wg sync.WaitGroup
				for i := 0; i < b.N; i++ {
					wg.Go(func() {
						start := time.Now()
						if _, err := lg.Append(ctx, la, rec); err != nil {
							t.Error(err)
						}
						lat[i] = time.Since(start)
					})
					time.Sleep(time.Second / rate)
				}
				wg.Wait()
				c := m.Counts().Sub(before)
				b.ReportMetric(float64(c.Put)/float64(b.N), "PUT/record")
				if rtt > 0 {
					slices.Sort(lat)
					var sum time.Duration
					for _, d := range lat {
						sum += d
					}
					b.ReportMetric(benchtest.Ratio(sum/time.Duration(b.N), rtt), "RTT/ack")
					b.ReportMetric(benchtest.Ratio(lat[len(lat)*99/100], rtt), "RTT/ack-p99")
				}
			})
		})
	}
}

// BenchmarkCellCeiling: the throughput ceiling of one cell. W appenders
// append back to back (a closed loop) to one cell. With one PUT in flight
// per cell, a cell commits at most one batch per RTT, so records/RTT is
// the batch size: ideally W, capped by the batch bounds (4,096 records or
// 4 MiB). At rtt=0, records/s is deed's CPU ceiling on this machine.
func BenchmarkCellCeiling(b *testing.B) {
	for _, w := range []int{1, 64, 1024, 16384} {
		for _, rtt := range benchtest.RTTs {
			b.Run(fmt.Sprintf("appenders=%d/%s", w, benchtest.Name(rtt)), func(b *testing.B) {
				benchtest.Run(b, rtt, func(t testing.TB) {
					m := fakes3.NewMem()
					la := claim(t, m, "a", false)
					lg := open(t, m, la)
					m.Inject(fakes3.Rule{Latency: rtt})
					before := m.Counts()
					elapsed := closedLoop(t, b.N, w, []*replication.Log{lg}, []*owner.Lease{la})
					c := m.Counts().Sub(before)
					b.ReportMetric(float64(b.N)/float64(c.Put), "records/PUT")
					if rtt > 0 {
						b.ReportMetric(float64(b.N)/benchtest.Ratio(elapsed, rtt), "records/RTT")
					} else {
						b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
					}
				})
			})
		}
	}
}

// BenchmarkNodeCeiling: one node holding many cells, each with its own
// appenders. Cells commit independently (one PUT in flight each), so in
// virtual time records/RTT grows with the cell count; at rtt=0 records/s
// is the node's CPU ceiling on this machine.
func BenchmarkNodeCeiling(b *testing.B) {
	const cells, each = 1000, 16
	for _, rtt := range benchtest.RTTs {
		b.Run(fmt.Sprintf("cells=%d/appenders=%d/%s", cells, cells*each, benchtest.Name(rtt)), func(b *testing.B) {
			benchtest.Run(b, rtt, func(t testing.TB) {
				ctx := context.Background()
				m := fakes3.NewMem()
				n, err := owner.NewNode(m, owner.Config{Name: "a"})
				if err != nil {
					t.Fatal(err)
				}
				logs := make([]*replication.Log, cells)
				leases := make([]*owner.Lease, cells)
				for i := range cells {
					if leases[i], err = n.Claim(ctx, fmt.Sprintf("cell-%04d", i), owner.ClaimOptions{}); err != nil {
						t.Fatal(err)
					}
					logs[i] = open(t, m, leases[i])
				}
				m.Inject(fakes3.Rule{Latency: rtt})
				before := m.Counts()
				elapsed := closedLoop(t, b.N, cells*each, logs, leases)
				c := m.Counts().Sub(before)
				b.ReportMetric(float64(b.N)/float64(c.Put), "records/PUT")
				if rtt > 0 {
					b.ReportMetric(float64(b.N)/benchtest.Ratio(elapsed, rtt), "records/RTT")
				} else {
					b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
				}
			})
		})
	}
}

// closedLoop appends total 100-byte records from w goroutines, appender i
// writing to logs[i%len(logs)], and returns the time it took.
func closedLoop(t testing.TB, total, w int, logs []*replication.Log, leases []*owner.Lease) time.Duration {
	ctx := context.Background()
	rec := make([]byte, 100)
	var left atomic.Int64
	left.Store(int64(total))
	start := time.Now()
	var wg sync.WaitGroup
	for i := range w {
		lg, la := logs[i%len(logs)], leases[i%len(leases)]
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if _, err := lg.Append(ctx, la, rec); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkRestore: objects read to restore a cell whose log holds 10,000
// transactions, from the origin and from a snapshot covering all but the
// last 100. Restore reads one object per transaction after its starting
// point, plus a LIST to find the newest snapshot and the probes that find
// the chain's end; at 20 ms it issues them one after the other, so
// RTT/restore is the number of sequential round trips.
func BenchmarkRestore(b *testing.B) {
	const txns, tail = 10000, 100
	for _, snap := range []bool{false, true} {
		for _, rtt := range benchtest.RTTs {
			name := "no-snapshot"
			if snap {
				name = fmt.Sprintf("snapshot-at-%d", txns-tail)
			}
			b.Run(fmt.Sprintf("txns=%d/%s/%s", txns, name, benchtest.Name(rtt)), func(b *testing.B) {
				benchtest.Run(b, rtt, func(t testing.TB) {
					ctx := context.Background()
					m := fakes3.NewMem()
					la := claim(t, m, "a", false)
					lg, err := replication.Open(ctx, m, la)
					if err != nil {
						t.Fatal(err)
					}
					for i := range txns {
						if _, err := lg.Append(ctx, la, fmt.Appendf(nil, "record %d", i)); err != nil {
							t.Fatal(err)
						}
						if snap && i+1 == txns-tail {
							if _, err := lg.Snapshot(ctx, la, replication.TxID(i+1), []byte("state")); err != nil {
								t.Fatal(err)
							}
						}
					}
					if err := lg.Close(ctx); err != nil {
						t.Fatal(err)
					}
					m.Inject(fakes3.Rule{Latency: rtt})
					before := m.Counts()
					var total time.Duration
					for i := 0; i < b.N; i++ {
						start := time.Now()
						var got int
						_, err := replication.Restore(ctx, m, cell, nil, func(replication.Record) error { got++; return nil })
						if err != nil {
							t.Fatal(err)
						}
						if want := map[bool]int{false: txns, true: tail}[snap]; got != want {
							t.Fatalf("restored %d records, want %d", got, want)
						}
						total += time.Since(start)
					}
					c := m.Counts().Sub(before)
					n := float64(b.N)
					b.ReportMetric(float64(c.Get)/n, "GET/restore")
					b.ReportMetric(float64(c.Total())/n, "req/restore")
					if rtt > 0 {
						b.ReportMetric(benchtest.Ratio(total/time.Duration(b.N), rtt), "RTT/restore")
					}
				})
			})
		}
	}
}

// BenchmarkAcquire: the latency from deciding to own a cell to being able
// to append to it — a claim (GET, conditional PUT) and then Open, which
// fences every predecessor before the first write (docs/design.md, "Sealing
// predecessors, with bounded fencing"):
//
//   - absent: a cell never claimed;
//   - released: a cell whose previous owner closed its log (sealing its
//     chain end) and released it;
//   - dead-owner: a cell whose owner appended and then died without
//     closing, so the new owner must find the chain's end and seal it.
//
// The claimer is an open node that observes its peers. RTT/acquire is the
// latency over the RTT; req/acquire counts the requests on the cell's keys.
func BenchmarkAcquire(b *testing.B) {
	for _, kind := range []string{"absent", "released", "dead-owner"} {
		for _, rtt := range benchtest.RTTs {
			b.Run(kind+"/"+benchtest.Name(rtt), func(b *testing.B) {
				benchtest.Bubble(b, func(t *testing.T) { benchAcquire(t, b, kind, rtt) })
			})
		}
	}
}

func benchAcquire(t *testing.T, b *testing.B, kind string, rtt time.Duration) {
	ctx := context.Background()
	m := fakes3.NewMem()
	cells := make([]string, b.N)
	prev, err := owner.NewNode(m.Client("gone"), owner.Config{Name: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if err := prev.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		m.Partition("gone", false)
		_ = prev.Close(ctx) // it has fenced: nothing left to release
	}()
	for i := range cells {
		cells[i] = fmt.Sprintf("cell-%d", i)
		if kind == "absent" {
			continue
		}
		l, err := prev.Claim(ctx, cells[i], owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lg, err := replication.Open(ctx, m, l)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lg.Append(ctx, l, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if kind == "released" {
			if err := lg.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The previous owner crashes: its node lease is never renewed again.
	m.Partition("gone", true)
	m.Set(owner.NodeKey("gone"), fmt.Appendf(nil, `{"node":"gone","incarnation":%q,"addr":"http://gone","ttl_ms":10000,"seq":7,"at_ms":0}`, prev.Incarnation()))
	m.Inject(fakes3.Rule{Latency: rtt})
	counted := &benchtest.Counted{B: m, Prefix: "cells/"}
	n, err := owner.NewNode(counted, owner.Config{Name: "me", Addr: "http://me"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if kind == "dead-owner" {
		p := n.Params()
		time.Sleep(p.TTL + p.Margin + p.TTL/3)
	}
	logs := make([]*replication.Log, 0, len(cells))
	before := counted.Counts()
	start := time.Now()
	for _, cell := range cells {
		l, err := n.Claim(ctx, cell, owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lg, err := replication.Open(ctx, counted, l)
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, lg)
	}
	elapsed := time.Since(start)
	c := counted.Counts().Sub(before)
	b.ReportMetric(float64(c.Total())/float64(b.N), "req/acquire")
	if rtt > 0 {
		b.ReportMetric(benchtest.Ratio(elapsed/time.Duration(b.N), rtt), "RTT/acquire")
	}
	for _, lg := range logs {
		if err := lg.Close(ctx); err != nil {
			t.Error(err)
		}
	}
	if err := n.Close(ctx); err != nil {
		t.Error(err)
	}
}
