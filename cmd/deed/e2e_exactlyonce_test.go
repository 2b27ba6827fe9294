package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/replication"
)

// Exactly-once with real processes: clients send every append with its key
// (the value) to a random node of a 3-node fleet, and on any answer but a
// final one send it again, same key, to another random node, while the
// holders are killed (kill -9, then restarted), paused (SIGSTOP past the
// TTL) and moved. Afterwards the log holds each value at most once — once
// for every value that was answered 200 — and every 200 names the position
// the value holds.
func TestE2EKeyedAppendsExactlyOnce(t *testing.T) {
	longE2E(t)
	c := newE2ECluster(t)
	secret := fleetSecretFile(t)
	const ttl = 2 * time.Second
	names := []string{"n1", "n2", "n3"}
	var mu sync.Mutex // guards procs, bases and clients: a restarted node has a new port
	procs := map[string]*proc{}
	bases := map[string]string{}
	clients := map[string]*client.Client{}
	start := func(n string) {
		p, base := c.daemon(t, n, "--fleet-secret-file", secret) // --ttl 2s
		cl, err := client.New(base, client.Options{RetryFor: -1, HTTPClient: &http.Client{Timeout: 5 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		procs[n], bases[n], clients[n] = p, base, cl
		mu.Unlock()
	}
	for _, n := range names {
		start(n)
	}
	time.Sleep(ttl + ttl/2) // every node has seen the others

	cells := []string{"eo-a", "eo-b", "eo-c"}
	type answer struct {
		cell, value string
		res         client.AppendResult
		code        errcode.Code // "" = 200
	}
	var answers []answer
	var amu sync.Mutex
	retried, replayed := 0, 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				cell, value := cells[rng.IntN(len(cells))], fmt.Sprintf("w%d-%d", w, i)
				a := answer{cell: cell, value: value}
				unknown := false
				deadline := time.Now().Add(30 * time.Second)
				for try := 0; time.Now().Before(deadline); try++ {
					if try == 1 {
						amu.Lock()
						retried++
						amu.Unlock()
					}
					mu.Lock()
					cl := clients[names[rng.IntN(len(names))]]
					mu.Unlock()
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					res, err := cl.AppendWith(ctx, cell, []byte(value), client.AppendOptions{Key: value})
					cancel()
					if err == nil {
						a.res, a.code = res, ""
						if res.Replayed {
							amu.Lock()
							replayed++
							amu.Unlock()
						}
						break
					}
					a.code = errcode.CodeOf(err)
					if a.code == errcode.CodeAmbiguous {
						unknown = true
					}
					switch a.code {
					case errcode.CodeUnavailable, errcode.CodeAmbiguous, errcode.CodePeer, errcode.CodeSuperseded,
						errcode.CodeReleased, errcode.CodeNodeFenced, errcode.CodeHeld, errcode.CodeNotHolder:
						time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond)
						continue
					}
					t.Errorf("append %s to %s: %v", value, cell, err)
					break
				}
				if a.code != "" && unknown {
					a.code = errcode.CodeAmbiguous
				}
				amu.Lock()
				answers = append(answers, a)
				amu.Unlock()
			}
		})
	}

	// Chaos: kill -9 and restart, pause past the TTL, move; one at a time.
	holder := func(cell string) string {
		for _, n := range names {
			mu.Lock()
			base := bases[n]
			mu.Unlock()
			for _, h := range heldCellsQuiet(base) {
				if h == cell {
					return n
				}
			}
		}
		return ""
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 6 {
		cell := cells[round%len(cells)]
		n := holder(cell)
		if n == "" {
			n = names[rng.IntN(len(names))]
		}
		mu.Lock()
		p, base := procs[n], bases[n]
		mu.Unlock()
		switch round % 3 {
		case 0:
			t.Logf("round %d: kill -9 %s (holds %s)", round, n, cell)
			p.signal(t, syscall.SIGKILL)
			<-p.done
			time.Sleep(ttl)
			start(n)
		case 1:
			t.Logf("round %d: SIGSTOP %s (holds %s) for 1.5 TTL", round, n, cell)
			p.signal(t, syscall.SIGSTOP)
			time.Sleep(ttl + ttl/2)
			p.signal(t, syscall.SIGCONT)
		case 2:
			to := names[(indexOf(names, n)+1)%len(names)]
			t.Logf("round %d: move %s from %s to %s", round, cell, n, to)
			_, _ = post(t, base+"/v1/cells/"+cell+"/move?to="+to, "")
		}
		time.Sleep(ttl)
	}
	close(stop)
	wg.Wait()

	b := e2eBucketPrefix(t, c, true)
	ok, unknown := 0, 0
	for _, cell := range cells {
		recs, err := replication.Read(t.Context(), b, cell, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		at := map[string][]replication.Pos{}
		for _, r := range recs {
			at[string(r.Data)] = append(at[string(r.Data)], r.Pos)
		}
		for v, ps := range at {
			if len(ps) > 1 {
				t.Errorf("%s: %q is in the log %d times, at %v", cell, v, len(ps), ps)
			}
		}
		for _, a := range answers {
			if a.cell != cell {
				continue
			}
			ps := at[a.value]
			switch a.code {
			case "":
				ok++
				if len(ps) != 1 || uint64(ps[0]) != a.res.Pos {
					t.Errorf("%s: %q answered 200 at pos %d, in the log at %v", cell, a.value, a.res.Pos, ps)
				}
			case errcode.CodeAmbiguous:
				unknown++
			default:
				if len(ps) != 0 {
					t.Errorf("%s: %q refused (%s) but in the log at %v", cell, a.value, a.code, ps)
				}
			}
		}
	}
	t.Logf("%d appends answered 200 (%d of them replays of an earlier attempt), %d unknown after 30 s of retries, %d answers in all; %d appends retried", ok, replayed, unknown, len(answers), retried)
	if ok == 0 {
		t.Fatal("no append succeeded")
	}
}

func indexOf(xs []string, x string) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}

// heldCellsQuiet is heldCells without failing the test: a node may be
// down or paused.
func heldCellsQuiet(base string) []string {
	hc := &http.Client{Timeout: time.Second}
	c, err := client.New(base, client.Options{HTTPClient: hc})
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v, err := c.Cells(ctx)
	if err != nil {
		return nil
	}
	var out []string
	for _, h := range v.Cells {
		out = append(out, h.Cell)
	}
	return out
}
