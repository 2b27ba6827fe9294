package main

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A SIGTERM of one node of a fleet leaves as `deed drain` does: its lease
// says draining, its cells are handed off and its peers stop routing to it
// before its listener closes. Appends through the other nodes, to cells it
// held among others, are every one answered 2xx: none meets a refused dial
// (DEED-E013) or a forward cut off in flight (DEED-E012).
func TestE2ESIGTERMLeavesLikeADrain(t *testing.T) {
	c := newE2ECluster(t)
	secretFile := fleetSecretFile(t)
	const ttl = 2 * time.Second
	names := []string{"n1", "n2", "n3"}
	procs, base := map[string]*proc{}, map[string]string{}
	for _, n := range names {
		procs[n] = startDeed(t, c.env, "run", "--node", n, "--listen", anyPort, "--ttl", ttl.String(), "--fleet-secret-file", secretFile)
	}
	for _, n := range names {
		base[n] = waitNode(t, procs[n], n)
	}
	time.Sleep(ttl + ttl/2) // every node has seen the others

	const cells = 30
	held := map[string]int{}
	for i := range cells {
		r := routedCall(t, "POST", base["n1"]+fmt.Sprintf("/v1/cells/leave-%02d/append", i), "first")
		if r.status != 200 {
			t.Fatalf("append leave-%02d: %d %s", i, r.status, r.body)
		}
		held[r.node]++
	}
	if held["n2"] == 0 {
		t.Fatalf("n2 holds none of the cells (%v)", held)
	}

	var mu sync.Mutex
	var bad []string
	sent := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, via := range []string{"n1", "n3"} {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := routedCall(t, "POST", base[via]+fmt.Sprintf("/v1/cells/leave-%02d/append", i%cells), "x")
				mu.Lock()
				sent++
				if r.status != 200 {
					bad = append(bad, fmt.Sprintf("via %s: %d %s", via, r.status, r.body))
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	termed := time.Now()
	procs["n2"].signal(t, syscall.SIGTERM)
	if st := procs["n2"].wait(t, 40*time.Second); st != 0 {
		t.Errorf("n2 exited %d after SIGTERM", st)
	}
	left := time.Since(termed)
	time.Sleep(ttl) // the lease released: peers settle
	close(stop)
	wg.Wait()
	t.Logf("n2 (holding %d of %d cells) left %v after SIGTERM; %d appends through n1 and n3, %d not 2xx", held["n2"], cells, left.Round(time.Millisecond), sent, len(bad))
	if len(bad) > 0 {
		t.Fatalf("%d of %d appends refused around the SIGTERM, first: %s", len(bad), sent, bad[0])
	}
}
