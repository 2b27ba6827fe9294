package owner_test

// Benchmarks of claims against the limit S3 round trips set: one
// conditional PUT, 1 RTT. A claim sends that PUT first when it can guess
// it (a never-claimed cell, a cell this node released); otherwise it reads
// own.json first, 2 RTT. A refused guess costs one RTT more, and after one
// refusal a node reads unknown cells first (see owner's hintTable), so a
// run of cells that exist costs 3 RTT for its first claim only. Run with
// `make bench`; see docs/performance.md.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/benchtest"
	"github.com/deedkit/deed/owner"
)

// BenchmarkClaim claims cells one after the other, as a node that holds
// its node lease and observes its peers (its renewal loop running):
//
//   - absent: cells never claimed (PUT If-None-Match: 1 RTT);
//   - reclaim-own: cells this node claimed and released before (PUT
//     If-Match on the ETag its release produced: 1 RTT);
//   - released: cells another process released, which this node has never
//     seen (GET, PUT If-Match: 2 RTT; the first claim tries a create
//     first, refused: 3 RTT);
//   - dead-owner: cells held by a node whose lease this node has seen
//     unchanged for longer than TTL+margin (GET, PUT If-Match: the record
//     names the incarnation that wrote it, and the peer LIST of the renewal
//     loop already proves that incarnation dead, so the takeover reads
//     nothing more; the first claim tries a create first, as above);
//   - dead-owner-noinc: the same with records that do not name an
//     incarnation (written by a node that never opened): the owner's lease
//     is read again before each takeover, one more RTT.
//
// RTT/claim is the claim's latency over the RTT (limit 1); req/claim
// counts the requests on cells/ keys. Both RTTs run in a synctest bubble,
// so at rtt=0 ns/op is deed's CPU cost per claim (plus a little setup).
func BenchmarkClaim(b *testing.B) {
	for _, kind := range []string{"absent", "reclaim-own", "released", "dead-owner", "dead-owner-noinc"} {
		for _, rtt := range benchtest.RTTs {
			b.Run(kind+"/"+benchtest.Name(rtt), func(b *testing.B) {
				benchtest.Bubble(b, func(t *testing.T) { benchClaims(t, b, kind, rtt) })
			})
		}
	}
}

func benchClaims(t *testing.T, b *testing.B, kind string, rtt time.Duration) {
	ctx := context.Background()
	m := fakes3.NewMem()
	m.Inject(fakes3.Rule{Latency: rtt})
	cells := make([]string, b.N)
	for i := range cells {
		cells[i] = fmt.Sprintf("cell-%d", i)
		switch kind {
		case "released":
			m.Set(owner.CellKey(cells[i]), fmt.Appendf(nil, `{"node":"","epoch":1,"nonce":"%032x","at_ms":0}`, i))
		case "dead-owner":
			m.Set(owner.CellKey(cells[i]), fmt.Appendf(nil, `{"node":"gone","epoch":1,"nonce":"%032x","at_ms":0,"inc":"1"}`, i))
		case "dead-owner-noinc":
			m.Set(owner.CellKey(cells[i]), fmt.Appendf(nil, `{"node":"gone","epoch":1,"nonce":"%032x","at_ms":0}`, i))
		}
	}
	if strings.HasPrefix(kind, "dead-owner") {
		// A node lease that is never renewed again: its owner crashed.
		m.Set(owner.NodeKey("gone"), []byte(`{"node":"gone","incarnation":"1","addr":"http://gone","ttl_ms":10000,"seq":7,"at_ms":0}`))
	}
	counted := &benchtest.Counted{B: m, Prefix: "cells/"}
	n, err := owner.NewNode(counted, owner.Config{Name: "me", Addr: "http://me"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := n.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	if strings.HasPrefix(kind, "dead-owner") {
		p := n.Params()
		time.Sleep(p.TTL + p.Margin + p.TTL/3) // the observer has seen "gone" unchanged long enough
		if n.Observer().Alive("gone") {
			t.Fatal("the crashed node still looks alive")
		}
	}
	if kind == "reclaim-own" {
		for _, cell := range cells {
			l, err := n.Claim(ctx, cell, owner.ClaimOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := counted.Counts()
	start := time.Now()
	for _, cell := range cells {
		if _, err := n.Claim(ctx, cell, owner.ClaimOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	c := counted.Counts().Sub(before)
	b.ReportMetric(float64(c.Total())/float64(b.N), "req/claim")
	if rtt > 0 {
		b.ReportMetric(benchtest.Ratio(elapsed/time.Duration(b.N), rtt), "RTT/claim")
	}
}
