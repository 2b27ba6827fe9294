package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/benchtest"
	"github.com/deedkit/deed/owner"
)

// BenchmarkIdleReclaim: what the first request to a cell costs after the
// idle sweep released it. The cells are appended to once, released by the
// sweep (IdleRelease 1 min, one virtual hour of waiting), then claimed
// again and appended to one at a time, with rtt added to every store
// request:
//
//   - RTT/claim: the claim, until the first request on a key of the log
//     (the open's, or the first append's when the open sends none). This
//     node released the cell itself, so it claims with one PUT If-Match
//     on the ETag its release wrote.
//   - RTT/acquire: the claim and the log's open (which sends nothing: the
//     claim record announces the epoch, and the release named the chain
//     end this node's own log sealed).
//   - RTT/first-append: the whole first append, acquire included.
//
// req/acquire counts the requests on the cell's keys. Target (issue 13):
// released → claimed again in 2 RTT.
func BenchmarkIdleReclaim(b *testing.B) {
	for _, rtt := range benchtest.RTTs {
		b.Run(benchtest.Name(rtt), func(b *testing.B) {
			benchtest.Bubble(b, func(t *testing.T) { benchIdleReclaim(t, b, rtt) })
		})
	}
}

func benchIdleReclaim(t *testing.T, b *testing.B, rtt time.Duration) {
	ctx := context.Background()
	m := fakes3.NewMem()
	m.Inject(fakes3.Rule{Latency: rtt})
	var cellReqs, logged atomic.Int64
	m.Inject(fakes3.Rule{Match: func(_ fakes3.Op, key string) bool {
		if strings.HasPrefix(key, "cells/") {
			cellReqs.Add(1)
			if strings.Contains(key, "/ltx/") {
				logged.CompareAndSwap(0, time.Now().UnixNano())
			}
		}
		return false // counts, faults nothing
	}})
	d, err := Open(ctx, Config{Node: "bench", Advertise: "http://bench", TTL: owner.DefaultTTL, IdleRelease: time.Minute},
		m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer closeDaemon(t, d)
	h := d.Handler()
	cells := make([]string, b.N)
	for i := range cells {
		cells[i] = fmt.Sprintf("cell-%06d", i)
		mustAppend(t, h, cells[i], "before")
	}
	time.Sleep(time.Hour)
	if n := releasedCount(t, d, releasedIdle); n != b.N || d.countHeld() != 0 {
		t.Fatalf("%d cells released for idleness, %d held; want %d and 0", n, d.countHeld(), b.N)
	}
	var acquireReqs int64
	var claimTime, acquireTime, firstAppend time.Duration
	for _, cell := range cells {
		reqs0 := cellReqs.Load()
		logged.Store(0)
		start := time.Now()
		c, err := d.acquire(ctx, cell, false)
		if err != nil {
			t.Fatal(err)
		}
		acquireTime += time.Since(start)
		acquireReqs += cellReqs.Load() - reqs0
		if c.lease.Epoch() != 2 {
			t.Fatalf("%s claimed again at epoch %d, want 2", cell, c.lease.Epoch())
		}
		mustAppend(t, h, cell, "after")
		firstAppend += time.Since(start)
		claimTime += time.Unix(0, logged.Load()).Sub(start)
	}
	b.ReportMetric(float64(acquireReqs)/float64(b.N), "req/acquire")
	if rtt > 0 {
		per := func(d time.Duration) float64 { return benchtest.Ratio(d/time.Duration(b.N), rtt) }
		b.ReportMetric(per(claimTime), "RTT/claim")
		b.ReportMetric(per(acquireTime), "RTT/acquire")
		b.ReportMetric(per(firstAppend), "RTT/first-append")
	}
}
