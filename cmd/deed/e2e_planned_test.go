package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Only planned operations — moves, a drain and its undoing, a SIGTERM and
// restart of one node, a 5th node joining then leaving (SIGTERM), a quiet
// spell in which idle cells are released — on a fleet of 4 with clients
// appending and reading with a barrier through random nodes: every answer
// is 2xx, and every acknowledged record is read back exactly once.
func TestE2EPlannedOperations(t *testing.T) {
	longE2E(t)
	c := newE2ECluster(t)
	secretFile := fleetSecretFile(t)
	// 5 s, not the 2 s of other fleet tests: five daemons and a store on a
	// loaded machine must not fence (a fault, which this test is not about).
	const ttl = 5 * time.Second
	start := func(n string) *proc {
		return startDeed(t, c.env, "run", "--node", n, "--listen", anyPort, "--ttl", ttl.String(),
			"--fleet-secret-file", secretFile, "--idle-release", "3s")
	}
	f := newE2EFleet()
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		f.proc[n] = start(n)
	}
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		f.setUp(n, waitNode(t, f.proc[n], n), true)
	}
	time.Sleep(ttl + ttl/2)

	const cells = 24
	var mu sync.Mutex
	var bad []string
	acked := map[string]map[string]bool{} // cell → payloads
	answers := 0
	note := func(what string, status int, body string) {
		mu.Lock()
		defer mu.Unlock()
		answers++
		if status/100 != 2 {
			bad = append(bad, fmt.Sprintf("%s: %d %s", what, status, body))
		}
	}
	hc := &http.Client{Timeout: 60 * time.Second}
	call := func(method, url, body string) (int, string, bool) {
		req, _ := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error(), false // no answer: the node stopped taking connections
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw), true
	}
	var paused sync.Mutex // held: clients touch only cells 0-3
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				span := cells
				if !paused.TryLock() {
					span = 4
				} else {
					paused.Unlock()
				}
				cell := fmt.Sprintf("p-%02d", rand.N(span))
				node, base := f.pick()
				payload := fmt.Sprintf("w%d-%d", w, i)
				st, body, ok := call("POST", base+"/v1/cells/"+cell+"/append", payload)
				if ok {
					note("append "+cell+" via "+node, st, body)
					if st == 200 {
						mu.Lock()
						if acked[cell] == nil {
							acked[cell] = map[string]bool{}
						}
						acked[cell][payload] = true
						mu.Unlock()
					}
				}
				if i%4 == 0 {
					node, base = f.pick()
					if st, body, ok := call("GET", base+"/v1/cells/"+cell+"/records?barrier=true&limit=1", ""); ok {
						note("barrier read "+cell+" via "+node, st, body)
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	began := time.Now()
	step := func(what string) { t.Logf("%v: %s", time.Since(began).Round(time.Millisecond), what) }
	time.Sleep(2 * time.Second)

	// Moves: three cells, each from its holder to another node.
	for i, to := range []string{"n1", "n2", "n3"} {
		cell := fmt.Sprintf("p-%02d", i)
		from := f.holderOf(cell)
		if from == "" || from == to {
			continue
		}
		if st, body, _ := call("POST", f.all[from]+"/v1/cells/"+cell+"/move?to="+to, ""); st != 200 {
			t.Errorf("move %s from %s to %s: %d %s", cell, from, to, st, body)
		}
		time.Sleep(300 * time.Millisecond)
	}
	step("moves done")
	// A drain of n3, then its undoing.
	if st, body, _ := call("POST", f.all["n3"]+"/v1/node/drain", ""); st != 200 {
		t.Fatalf("drain n3: %d %s", st, body)
	}
	time.Sleep(ttl)
	if st, body, _ := call("DELETE", f.all["n3"]+"/v1/node/drain", ""); st != 200 {
		t.Fatalf("undrain n3: %d %s", st, body)
	}
	time.Sleep(ttl / 2)
	step("drain and undrain of n3 done")
	// SIGTERM n4 and start it again.
	f.setUp("n4", "", false)
	f.proc["n4"].signal(t, syscall.SIGTERM)
	if st := f.proc["n4"].wait(t, 40*time.Second); st != 0 {
		t.Errorf("n4 exited %d after SIGTERM", st)
	}
	f.proc["n4"] = start("n4")
	f.setUp("n4", waitNode(t, f.proc["n4"], "n4"), true)
	step("n4 restarted")
	time.Sleep(ttl / 2)
	// A 5th node joins, and leaves.
	f.proc["n5"] = start("n5")
	f.setUp("n5", waitNode(t, f.proc["n5"], "n5"), true)
	time.Sleep(ttl + ttl/2)
	f.setUp("n5", "", false)
	f.proc["n5"].signal(t, syscall.SIGTERM)
	if st := f.proc["n5"].wait(t, 40*time.Second); st != 0 {
		t.Errorf("n5 exited %d after SIGTERM", st)
	}
	delete(f.all, "n5")
	step("n5 joined and left")
	// A quiet spell: most cells idle past --idle-release, then busy again.
	paused.Lock()
	time.Sleep(5 * time.Second)
	paused.Unlock()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	// Every acknowledged record, read back exactly once.
	_, base := f.pick()
	for cell, want := range acked {
		seen := map[string]int{}
		for after := 0; ; {
			st, body, _ := call("GET", fmt.Sprintf("%s/v1/cells/%s/records?barrier=true&after=%d&limit=1000", base, cell, after), "")
			var page struct {
				Records []struct {
					Pos  int    `json:"pos"`
					Data string `json:"data"`
				} `json:"records"`
			}
			if st != 200 || json.Unmarshal([]byte(body), &page) != nil {
				t.Fatalf("read %s: %d %s", cell, st, body)
			}
			for _, r := range page.Records {
				d, _ := base64.StdEncoding.DecodeString(r.Data)
				seen[string(d)]++
				after = r.Pos
			}
			if len(page.Records) < 1000 {
				break
			}
		}
		for p := range want {
			if seen[p] != 1 {
				t.Errorf("cell %s: acknowledged record %s read back %d times", cell, p, seen[p])
			}
		}
	}
	t.Logf("%d answers in %v of planned operations, %d not 2xx", answers, time.Since(began).Round(time.Second), len(bad))
	for i, b := range bad {
		if i == 10 {
			break
		}
		t.Errorf("refused: %s", b)
	}
}
