// Package benchtest holds what deed's benchmarks share: running a benchmark
// body inside a testing/synctest bubble, so that an injected S3 round-trip
// time costs virtual time rather than wall time, and a bucket wrapper that
// counts requests by key prefix.
//
// It is imported only from _test.go files.
package benchtest

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
)

// RTTs are the round-trip times every latency benchmark runs with: none
// (the CPU cost of deed itself) and 20 ms (a typical same-region S3 PUT).
var RTTs = []time.Duration{0, 20 * time.Millisecond}

// Name is the sub-benchmark name for an RTT: "rtt=0" or "rtt=20ms".
func Name(rtt time.Duration) string { return "rtt=" + rtt.String() }

// Bubble runs f once inside a synctest bubble and returns when f and every
// goroutine it started have finished. Inside, time.Sleep and timers advance
// virtual time only when every goroutine in the bubble is blocked, so a
// benchmark that injects 20 ms per request runs at CPU speed while its
// measured latencies, divided by the RTT, count round trips exactly.
//
// synctest.Test needs a *testing.T, which a benchmark does not have; Bubble
// gets one from testing.RunTests (the exported entry point `go test` itself
// uses), with a filter that matches everything, so -run '^$' does not
// exclude it. It runs f only once even when -count or -cpu would make
// RunTests repeat its list, and restores GOMAXPROCS afterwards.
//
// f must not call b's timer methods (ResetTimer, StopTimer): inside the
// bubble time.Now is virtual. It may call b.ReportMetric. The benchmark's
// ns/op is the wall time of the whole body, setup included; for bubble
// benchmarks only the reported metrics are meaningful.
func Bubble(b *testing.B, f func(t *testing.T)) {
	b.Helper()
	ran := false
	procs := runtime.GOMAXPROCS(0)
	ok := testing.RunTests(func(string, string) (bool, error) { return true, nil }, []testing.InternalTest{{
		Name: strings.ReplaceAll(b.Name(), "/", "_"),
		F: func(t *testing.T) {
			if ran {
				return
			}
			ran = true
			synctest.Test(t, f)
		},
	}})
	runtime.GOMAXPROCS(procs)
	switch {
	case !ran:
		b.Skip("benchtest: the synctest bubble did not run (is -test.skip set?)")
	case !ok:
		b.Fatal("benchtest: the body failed inside its synctest bubble (see above)")
	}
}

// Run runs f in a bubble when rtt > 0, and directly (in real time) when
// rtt is 0, so that one body serves both: at rtt 0 the metrics measure
// deed's own CPU cost, at rtt > 0 they count round trips.
func Run(b *testing.B, rtt time.Duration, f func(t testing.TB)) {
	b.Helper()
	if rtt == 0 {
		f(b)
		return
	}
	Bubble(b, func(t *testing.T) { f(t) })
}

// Ratio is d in units of rtt, for metrics like "RTT/claim". It is 0 when
// rtt is 0 (the ratio is meaningless there).
func Ratio(d, rtt time.Duration) float64 {
	if rtt == 0 {
		return 0
	}
	return float64(d) / float64(rtt)
}

// Counted wraps a bucket and counts the requests whose key (or list
// prefix) starts with Prefix, so that a benchmark can count one layer's
// requests while a node's background loop uses the same store. It also
// keeps the largest body any Get returned: what one read held in memory.
type Counted struct {
	B      bucket.Bucket
	Prefix string

	get, head, put, del, list atomic.Int64
	largest                   atomic.Int64
}

// LargestBody is the size of the largest body a Get has returned.
func (c *Counted) LargestBody() int64 { return c.largest.Load() }

// Counts is a snapshot of a Counted's counters: the same kinds fakes3.Mem
// counts.
type Counts = fakes3.Counts

// Counts returns the counters now.
func (c *Counted) Counts() Counts {
	return Counts{Get: c.get.Load(), Head: c.head.Load(), Put: c.put.Load(), Delete: c.del.Load(), List: c.list.Load()}
}

func (c *Counted) count(n *atomic.Int64, key string) {
	if strings.HasPrefix(key, c.Prefix) {
		n.Add(1)
	}
}

func (c *Counted) Get(ctx context.Context, key string, max int64) (bucket.Object, error) {
	c.count(&c.get, key)
	o, err := c.B.Get(ctx, key, max)
	for n := int64(len(o.Body)); ; {
		if cur := c.largest.Load(); n <= cur || c.largest.CompareAndSwap(cur, n) {
			break
		}
	}
	return o, err
}

func (c *Counted) Head(ctx context.Context, key string) (bucket.Info, error) {
	c.count(&c.head, key)
	return c.B.Head(ctx, key)
}

func (c *Counted) Put(ctx context.Context, key string, body []byte, cond bucket.Condition) (string, error) {
	c.count(&c.put, key)
	return c.B.Put(ctx, key, body, cond)
}

func (c *Counted) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	c.count(&c.del, key)
	return c.B.Delete(ctx, key, cond)
}

func (c *Counted) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	c.count(&c.list, in.Prefix)
	return c.B.List(ctx, in)
}

var _ bucket.Bucket = (*Counted)(nil)
