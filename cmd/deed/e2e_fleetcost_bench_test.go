package main

import (
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkE2EIdleFleet measures, on the real binary, what an idle fleet
// of N `deed run` daemons (TTL 10s, a fleet secret, no cells) asks of its
// store, counted at a proxy in front of one `deed fakes3`: requests per
// node per renewal interval R = TTL/3, and the GETs among them, for N = 3,
// 10 and 30.
func BenchmarkE2EIdleFleet(b *testing.B) {
	for _, n := range []int{3, 10, 30} {
		b.Run(fmt.Sprint("nodes=", n), func(b *testing.B) {
			var reqs, gets float64
			ok := testing.RunTests(func(string, string) (bool, error) { return true, nil }, []testing.InternalTest{{
				Name: "idle", F: func(t *testing.T) { reqs, gets = idleFleet(t, n) },
			}})
			if !ok {
				b.Fatal("the fleet failed (see above)")
			}
			b.ReportMetric(reqs, "req/node/R")
			b.ReportMetric(gets, "GET/node/R")
		})
	}
}

func idleFleet(t *testing.T, n int) (reqs, gets float64) {
	c := newE2ECluster(t)
	var all, getN atomic.Int64
	env := storeProxy(t, c, func(r *http.Request) {
		all.Add(1)
		if r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "" {
			getN.Add(1)
			if os.Getenv("DEED_BENCH_LOG_GETS") != "" {
				t.Logf("GET %s at %s", r.URL.Path, time.Now().Format("05.000"))
			}
		}
	})
	secret := fleetSecretFile(t)
	const ttl = 10 * time.Second // the default
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			node := fmt.Sprintf("n%02d", i)
			p := startDeed(t, env, "run", "--node", node, "--listen", anyPort, "--ttl", ttl.String(), "--fleet-secret-file", secret)
			waitNode(t, p, node)
		})
	}
	wg.Wait()
	time.Sleep(3 * ttl) // every daemon has seen every other
	const rounds = 10
	a0, g0 := all.Load(), getN.Load()
	time.Sleep(rounds * ttl / 3)
	per := float64(n * rounds)
	return float64(all.Load()-a0) / per, float64(getN.Load()-g0) / per
}
