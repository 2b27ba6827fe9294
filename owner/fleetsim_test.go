package owner_test

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// simResult is what a simulated fleet measured.
type simResult struct {
	steady      float64       // store requests per node per R, idle
	steadyGET   float64       // of which GETs
	churn       float64       // requests per node per R over the churn
	churnGET    float64       // of which GETs
	detectP50   time.Duration // kill -9 → the victim judged dead, over (observer, victim) pairs
	detectMax   time.Duration
	agreeSteady float64 // share of nodes whose live set is the true one, idle
	agreeChurn  float64 // the same, TTL+margin+R after the churn settled
}

// simulateFleet runs n nodes (TTL 2s, margin 200ms, 10 ms per request, as
// a daemon runs them) on one counting in-memory store in virtual time:
// idle for 10 renewal intervals, then churn — n/20 nodes killed (-9: cut
// off the store), n/20 closed cleanly, n/20 joining, n/20 paused for TTL/2
// (cut off, then back, never fenced) — then settled.
func simulateFleet(t *testing.T, n int) simResult {
	var r simResult
	synctest.Test(t, func(t *testing.T) {
		const ttl = 2 * time.Second
		R := ttl / 3
		m := fakes3.NewMem()
		m.Inject(fakes3.Rule{Latency: 10 * time.Millisecond})
		key := owner.LeaseKey("the fleet secret of the simulation")
		nodes := map[string]*owner.Node{}
		open := func(name string) {
			nd, err := owner.NewNode(m.Client(name), owner.Config{Name: name, Addr: "http://" + name, TTL: ttl, WatchInterval: -1, LeaseKey: key})
			if err != nil {
				t.Fatal(err)
			}
			if err := nd.Open(t.Context()); err != nil {
				t.Fatal(err)
			}
			nodes[name] = nd
		}
		for i := range n {
			open(fmt.Sprintf("n%04d", i))
		}
		alive := func() []string {
			var out []string
			for name, nd := range nodes {
				if nd.Err() == nil {
					out = append(out, name)
				}
			}
			slices.Sort(out)
			return out
		}
		agree := func(want []string) float64 {
			ok, all := 0, 0
			for _, name := range want {
				all++
				var live []string
				for _, v := range nodes[name].Observer().View() {
					if v.Alive && v.Verified {
						live = append(live, v.Node)
					}
				}
				if slices.Equal(live, want) {
					ok++
				}
			}
			return float64(ok) / float64(all)
		}
		time.Sleep(2 * ttl)
		want := alive()
		r.agreeSteady = agree(want)
		before := m.Counts()
		const idle = 10
		time.Sleep(idle * R)
		c := m.Counts().Sub(before)
		r.steady = float64(c.Total()) / float64(n*idle)
		r.steadyGET = float64(c.Get) / float64(n*idle)

		k := max(1, n/20)
		names := slices.Sorted(func(yield func(string) bool) {
			for name := range nodes {
				if !yield(name) {
					return
				}
			}
		})
		killed, closed, paused := names[:k], names[k:2*k], names[2*k:3*k]
		before = m.Counts()
		start := time.Now()
		for _, name := range killed {
			m.Partition(name, true)
		}
		killAt := time.Now()
		for _, name := range closed {
			_ = nodes[name].Close(t.Context())
		}
		for _, name := range paused {
			m.Partition(name, true)
		}
		type join struct {
			name string
			nd   *owner.Node
			err  error
		}
		joined := make(chan join, k)
		for i := range k {
			go func() {
				j := join{name: fmt.Sprintf("j%04d", i)}
				j.nd, j.err = owner.NewNode(m.Client(j.name), owner.Config{Name: j.name, Addr: "http://" + j.name, TTL: ttl, WatchInterval: -1, LeaseKey: key})
				if j.err == nil {
					j.err = j.nd.Open(t.Context())
				}
				joined <- j
			}()
		}
		// Detection, sampled: every 10 ms, which observers still call each
		// victim alive.
		observers := names[3*k:]
		type pair struct{ o, v string }
		seen := map[pair]time.Duration{}
		for time.Since(killAt) < ttl+ttl {
			if time.Since(start) >= ttl/2 {
				for _, name := range paused {
					m.Partition(name, false)
				}
			}
			for _, o := range observers {
				for _, v := range killed {
					p := pair{o, v}
					if _, ok := seen[p]; !ok && !nodes[o].Observer().Alive(v) {
						seen[p] = time.Since(killAt)
					}
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		for range k {
			j := <-joined
			if j.err != nil {
				t.Fatalf("join %s: %v", j.name, j.err)
			}
			nodes[j.name] = j.nd
		}
		var ds []time.Duration
		for _, o := range observers {
			for _, v := range killed {
				d, ok := seen[pair{o, v}]
				if !ok {
					v2, _ := nodes[o].Observer().Lookup(v)
					t.Fatalf("%s still calls the killed %s alive %v after the kill: %+v (killed at %v); %s fenced: %v", o, v, time.Since(killAt), v2, killAt, v, nodes[v].Err())
				}
				ds = append(ds, d)
			}
		}
		slices.Sort(ds)
		r.detectP50, r.detectMax = ds[len(ds)/2], ds[len(ds)-1]
		for _, name := range paused {
			if err := nodes[name].Err(); err != nil {
				t.Fatalf("paused %s fenced: %v", name, err)
			}
		}
		churned := time.Since(start)
		c = m.Counts().Sub(before)
		rounds := float64(churned) / float64(R)
		r.churn = float64(c.Total()) / (float64(n) * rounds)
		r.churnGET = float64(c.Get) / (float64(n) * rounds)
		for _, name := range killed {
			nodes[name].Close(t.Context()) // fenced already: closes nothing on the store
			delete(nodes, name)
		}
		for _, name := range closed {
			delete(nodes, name)
		}
		r.agreeChurn = agree(alive())
		for _, nd := range nodes {
			_ = nd.Close(t.Context())
		}
	})
	return r
}

// TestFleetSimulation100 runs the simulated fleet at 100 nodes and checks
// the targets: idle ≤ 2.2 requests per node per R, ≤ 0.2 of them GETs;
// every killed node judged dead by every observer within TTL+margin+TTL/10
// (plus a round trip) of its kill; every node agreeing on the live set.
func TestFleetSimulation100(t *testing.T) {
	if testing.Short() {
		t.Skip("a simulated fleet of 100 nodes")
	}
	r := simulateFleet(t, 100)
	t.Logf("100 nodes: idle %.2f req/node/R (%.2f GET); churn %.2f (%.2f GET); death seen p50 %v max %v; agreement %.2f idle, %.2f after churn",
		r.steady, r.steadyGET, r.churn, r.churnGET, r.detectP50, r.detectMax, r.agreeSteady, r.agreeChurn)
	const ttl, margin = 2 * time.Second, 200 * time.Millisecond
	if r.steady > 2.2 || r.steadyGET > 0.2 {
		t.Errorf("idle: %.2f requests per node per R, %.2f GETs; want ≤ 2.2 and ≤ 0.2", r.steady, r.steadyGET)
	}
	if r.detectMax > ttl+margin+ttl/10+20*time.Millisecond {
		t.Errorf("a death was seen %v after the kill; want within TTL+margin+TTL/10", r.detectMax)
	}
	if r.agreeSteady != 1 || r.agreeChurn != 1 {
		t.Errorf("live-set agreement %.2f idle, %.2f after churn; want 1", r.agreeSteady, r.agreeChurn)
	}
}

// BenchmarkFleetSimulation reports the simulated fleet's numbers at 1,000
// nodes (and 100): requests and GETs per node per R idle and during churn,
// the time from a kill to its death being seen (p50, max over observer and
// victim), and live-set agreement.
func BenchmarkFleetSimulation(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprint("nodes=", n), func(b *testing.B) {
			once(b, b.Name(), func() map[string]float64 {
				var r simResult
				ok := testing.RunTests(func(string, string) (bool, error) { return true, nil }, []testing.InternalTest{{
					Name: "fleet", F: func(t *testing.T) { r = simulateFleet(t, n) },
				}})
				if !ok {
					b.Fatal("the simulation failed (see above)")
				}
				ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
				return map[string]float64{"req/node/R": r.steady, "GET/node/R": r.steadyGET,
					"churn-req/node/R": r.churn, "churn-GET/node/R": r.churnGET,
					"death-seen-p50-ms": ms(r.detectP50), "death-seen-max-ms": ms(r.detectMax),
					"agreement": r.agreeSteady, "agreement-after-churn": r.agreeChurn}
			})
		})
	}
}
