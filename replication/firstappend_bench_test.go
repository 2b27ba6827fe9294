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

// firstAppendRTT is the store's round trip in BenchmarkFirstAppend.
const firstAppendRTT = 20 * time.Millisecond

// BenchmarkFirstAppend measures the first append to a cell that is not
// held, from the claim to the acknowledgement (owner.Node.Claim,
// replication.Open, Log.Append), in a synctest bubble over a store that
// answers every request after 20 ms: requests/op counts the requests on
// cells/ keys (the node leases' renewals and LISTs are left out), rtt/op
// is the latency over the RTT, exact in virtual time. The rows:
//
//   - never-claimed: no own.json, no log;
//   - own-release: this node held the cell, appended, closed the log (its
//     seal) and released it (its ReleasedHint is kept);
//   - other-release: another live node did that (a drain, `deed release`);
//   - dead-owner: another node held the cell with records and crashed
//     (partitioned: its lease stays unchanged), and this node's observer
//     has proved it dead before the claim;
//   - move: another node released the cell and handed its release hint
//     over (owner.Node.NoteHint), as a daemon's handoff does; the seal, the
//     release and the push are not counted here.
func BenchmarkFirstAppend(b *testing.B) {
	for _, row := range []string{"never-claimed", "own-release", "other-release", "dead-owner", "move"} {
		b.Run(row, func(b *testing.B) {
			benchtest.Bubble(b, func(t *testing.T) {
				var total fakes3.Counts
				var elapsed time.Duration
				for range b.N {
					c, d := firstAppend(t, row)
					total = addCounts(total, c)
					elapsed += d
				}
				n := float64(b.N)
				b.ReportMetric(float64(total.Total())/n, "requests/op")
				b.ReportMetric(benchtest.Ratio(elapsed/time.Duration(b.N), firstAppendRTT), "rtt/op")
				b.ReportMetric(float64(total.Put)/n, "puts/op")
				b.ReportMetric(float64(total.Get+total.Head)/n, "reads/op")
				b.ReportMetric(float64(total.List)/n, "lists/op")
			})
		})
	}
}

func addCounts(a, b fakes3.Counts) fakes3.Counts {
	return fakes3.Counts{Get: a.Get + b.Get, Head: a.Head + b.Head, Put: a.Put + b.Put, Delete: a.Delete + b.Delete, List: a.List + b.List}
}

// firstAppend builds one world for row, then measures the first append
// of node "me" to the cell: the requests on cells/ keys and the time.
func firstAppend(t *testing.T, row string) (fakes3.Counts, time.Duration) {
	ctx := context.Background()
	m := fakes3.NewMem()
	m.Inject(fakes3.Rule{Latency: firstAppendRTT})
	counted := &benchtest.Counted{B: m, Prefix: "cells/"}
	openNode := func(name string, bk *benchtest.Counted) *owner.Node {
		n, err := owner.NewNode(bk, owner.Config{Name: name, Addr: "http://" + name})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Open(ctx); err != nil {
			t.Fatal(err)
		}
		return n
	}
	me := openNode("me", counted)
	defer closeNode(t, me)
	// hold makes n claim the cell, append a record and close its log.
	hold := func(n *owner.Node, bk *benchtest.Counted, release bool) (*owner.Lease, *replication.Log) {
		l, err := n.Claim(ctx, cell, owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lg, err := replication.Open(ctx, bk, l)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lg.Append(ctx, l, []byte("before")); err != nil {
			t.Fatal(err)
		}
		if release {
			if err := lg.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return l, lg
	}
	switch row {
	case "never-claimed":
	case "own-release":
		hold(me, counted, true)
	case "other-release", "move":
		ob := &benchtest.Counted{B: m, Prefix: "cells/"}
		other := openNode("other", ob)
		defer closeNode(t, other)
		hold(other, ob, true)
		if row == "move" {
			h, ok := other.ReleasedHint(cell)
			if !ok {
				t.Fatal("no release hint")
			}
			me.NoteHint(cell, h)
		}
	case "dead-owner":
		gb := &benchtest.Counted{B: m.Client("gone"), Prefix: "cells/"}
		gone := openNode("gone", gb)
		_, lg := hold(gone, gb, false)
		m.Partition("gone", true)
		p := me.Params()
		time.Sleep(2*p.TTL + p.Margin) // the observer has seen its lease unchanged long enough
		if me.Observer().Alive("gone") {
			t.Fatal("the crashed node still looks alive")
		}
		defer func() {
			lg.Abandon()
			m.Partition("gone", false)
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			_ = gone.Close(ctx)
		}()
	default:
		t.Fatalf("unknown row %q", row)
	}
	before := counted.Counts()
	start := time.Now()
	l, err := me.Claim(ctx, cell, owner.ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lg, err := replication.Open(ctx, counted, l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Append(ctx, l, []byte("first")); err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	c := counted.Counts().Sub(before)
	if err := lg.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return c, d
}

func closeNode(t *testing.T, n *owner.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Error(err)
	}
}
