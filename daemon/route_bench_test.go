package daemon

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/benchtest"
	"github.com/deedkit/deed/owner"
)

// BenchmarkForwardOverhead: what routing costs an append. Two daemons of
// one fleet share a store (fakes3.Mem, rtt added to every request); one
// holds the cell. Each iteration sends one 100-byte append to the holder
// (direct) and one to the other node, which forwards it to the holder and
// relays the answer (forwarded), in turn, one at a time, over keep-alive
// connections on 127.0.0.1. Reported: forwarded/direct, the ratio of the
// median latencies (-mean: of the totals), and each side's median in µs.
// The forward adds one loopback HTTP round trip and a copy of the answer;
// at a real store's latency that is a small share of an append.
func BenchmarkForwardOverhead(b *testing.B) {
	for _, rtt := range benchtest.RTTs {
		b.Run(benchtest.Name(rtt), func(b *testing.B) { benchForward(b, rtt) })
	}
}

func benchForward(b *testing.B, rtt time.Duration) {
	m := fakes3.NewMem()
	if rtt > 0 {
		m.Inject(fakes3.Rule{Latency: rtt})
	}
	serve := func(node string) (*Daemon, string) {
		srv := httptest.NewUnstartedServer(nil)
		url := "http://" + srv.Listener.Addr().String()
		d, err := Open(context.Background(), Config{Node: node, Advertise: url, TTL: owner.DefaultTTL, FleetSecret: testSecret},
			m.Client(node), slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		srv.Config.Handler = d.Handler()
		srv.Start()
		b.Cleanup(func() { srv.Close(); closeDaemon(b, d) })
		return d, url
	}
	holder, direct := serve("holder")
	_, other := serve("other")
	if _, err := holder.acquire(context.Background(), "bench", false); err != nil {
		b.Fatal(err)
	}
	rec := bytes.Repeat([]byte("r"), 100)
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	post := func(base string) {
		resp, err := hc.Post(base+"/v1/cells/bench/append", "application/octet-stream", bytes.NewReader(rec))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get(HeaderNode) != "holder" {
			b.Fatalf("append via %s: %s from %q", base, resp.Status, resp.Header.Get(HeaderNode))
		}
	}
	post(direct) // warm both connections
	post(other)
	var tDirect, tFwd pairTimes
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		post(direct)
		tDirect.add(start)
		start = time.Now()
		post(other)
		tFwd.add(start)
	}
	reportOverhead(b, tFwd, tDirect, "forwarded/direct")
	b.ReportMetric(float64(tDirect.median().Microseconds()), "direct-µs")
	b.ReportMetric(float64(tFwd.median().Microseconds()), "forwarded-µs")
}
