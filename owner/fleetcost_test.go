package owner_test

import (
	"flag"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

var fleetSizes = flag.String("fleet-sizes", "3,10,30,100", "fleet sizes TestFleetObservationCost measures")

// fleetCost runs n nodes (TTL ttl, as a daemon runs them: no record watch)
// on one in-memory store, in virtual time, and returns the requests each
// node sends per renewal interval R = TTL/3 once settled, by kind.
func fleetCost(t *testing.T, n int, ttl time.Duration, rounds int) (put, list, get float64) {
	var c fakes3.Counts
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		m.Inject(fakes3.Rule{Latency: 10 * time.Millisecond})
		var ns []*owner.Node
		for i := range n {
			nd, err := owner.NewNode(m.Client(fmt.Sprint("n", i)), owner.Config{Name: fmt.Sprintf("n%04d", i), Addr: "http://x", TTL: ttl, WatchInterval: -1, LeaseKey: owner.LeaseKey("a fleet secret of 16+")})
			if err != nil {
				t.Fatal(err)
			}
			if err := nd.Open(t.Context()); err != nil {
				t.Fatal(err)
			}
			ns = append(ns, nd)
			time.Sleep(ttl / 3 / time.Duration(n)) // phases spread over R
		}
		time.Sleep(2 * ttl) // every node has seen every other
		before := m.Counts()
		time.Sleep(time.Duration(rounds) * ttl / 3)
		c = m.Counts().Sub(before)
		for _, nd := range ns {
			if nd.Err() != nil {
				t.Fatalf("%s fenced: %v", nd.Name(), nd.Err())
			}
			for _, v := range nd.Observer().View() {
				if !v.Alive {
					t.Fatalf("%s sees %s dead", nd.Name(), v.Node)
				}
			}
		}
		for _, nd := range ns {
			_ = nd.Close(t.Context())
		}
	})
	per := float64(n * rounds)
	return float64(c.Put) / per, float64(c.List) / per, float64(c.Get) / per
}

// TestFleetObservationCost reports the idle store requests per node per
// renewal interval for fleets of -fleet-sizes nodes.
func TestFleetObservationCost(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	var sizes []int
	for _, s := range splitInts(*fleetSizes) {
		sizes = append(sizes, s)
	}
	for _, n := range sizes {
		put, list, get := fleetCost(t, n, 10*time.Second, 30)
		t.Logf("N=%4d: per node per R: %.2f PUT, %.2f LIST, %.2f GET = %.2f requests", n, put, list, get, put+list+get)
	}
}

func splitInts(s string) []int {
	var out []int
	var cur, any = 0, false
	for _, r := range s + "," {
		if r == ',' {
			if any {
				out = append(out, cur)
			}
			cur, any = 0, false
			continue
		}
		cur, any = cur*10+int(r-'0'), true
	}
	return out
}
