package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deedkit/deed/daemon"
	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
)

// routed is one answer of a daemon, with the node that served it.
type routed struct {
	status int
	node   string
	body   string
}

func routedCall(t *testing.T, method, url, body string) routed {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return routed{status: resp.StatusCode, node: resp.Header.Get(daemon.HeaderNode), body: string(raw)}
}

// heldCells is a node's GET /v1/cells.
func heldCells(t *testing.T, base string) []string {
	t.Helper()
	r := routedCall(t, "GET", base+"/v1/cells", "")
	var held client.HeldCells
	if r.status != 200 || json.Unmarshal([]byte(r.body), &held) != nil {
		t.Fatalf("GET %s/v1/cells: %d %s", base, r.status, r.body)
	}
	out := make([]string, len(held.Cells))
	for i, c := range held.Cells {
		out[i] = c.Cell
	}
	return out
}

// Three daemons of one fleet: appends to 60 cells through one node spread
// over the three (placement), reads through a node that does not hold a
// cell return its records (routing), and after a kill -9 the dead node's
// cells are served through the survivors within TTL + 3 s.
func TestE2EFleetRouting(t *testing.T) {
	c := newE2ECluster(t)
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "fleet-secret")
	if err := os.WriteFile(secretFile, []byte("e2e-fleet-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("too-short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, out := c.cli(t, "run", "--node", "n0", "--listen", anyPort, "--fleet-secret-file", short); st != 2 || !strings.Contains(out, string(errcode.CodeBadRequest)) {
		t.Fatalf("run with a short fleet secret: exit %d: %s", st, out)
	}
	if st, out := c.cli(t, "run", "--node", "n0", "--listen", anyPort, "--weight", "0"); st != 2 || !strings.Contains(out, string(errcode.CodeBadRequest)) {
		t.Fatalf("run with --weight 0: exit %d: %s", st, out)
	}

	const ttl = 2 * time.Second
	names := []string{"n1", "n2", "n3"}
	procs := map[string]*proc{}
	base := map[string]string{}
	for i, n := range names {
		extra := []string{"--fleet-secret-file", secretFile}
		if i == 2 {
			extra = nil // from the environment instead
		}
		args := append([]string{"run", "--node", n, "--listen", anyPort, "--ttl", ttl.String()}, extra...)
		env := c.env
		if i == 2 {
			env = append(append([]string{}, c.env...), envFleetSecret+"="+secretFile)
		}
		procs[n] = startDeed(t, env, args...)
	}
	for _, n := range names {
		base[n] = waitNode(t, procs[n], n)
	}
	// Each node lists the node leases every TTL/3: after 1.5 TTL every one
	// has seen the others, with room for a slow LIST on a loaded machine.
	time.Sleep(ttl + ttl/2)

	// 60 cells, every append through n1.
	owner := map[string]string{}
	for i := range 60 {
		cell := fmt.Sprintf("cell-%02d", i)
		r := routedCall(t, "POST", base["n1"]+"/v1/cells/"+cell+"/append", "rec-"+cell)
		if r.status != 200 || r.node == "" {
			t.Fatalf("append %s through n1: %d %q %s", cell, r.status, r.node, r.body)
		}
		owner[cell] = r.node
	}
	count := map[string]int{}
	for _, n := range names {
		for _, cell := range heldCells(t, base[n]) {
			if owner[cell] != n {
				t.Fatalf("%s holds %s, but %s served its append", n, cell, owner[cell])
			}
			count[n]++
		}
	}
	t.Logf("cells held: %v", count)
	for _, n := range names {
		if count[n] > 30 || count[n] == 0 {
			t.Fatalf("60 cells through n1 spread %v: want each node holding some, none more than 30", count)
		}
	}

	// Reads of every cell through a node that does not hold it; a barrier
	// read is served by the holder itself.
	for i := range 60 {
		cell := fmt.Sprintf("cell-%02d", i)
		via := names[0]
		for _, n := range names {
			if n != owner[cell] {
				via = n
				break
			}
		}
		want := b64("rec-" + cell)
		if r := routedCall(t, "GET", base[via]+"/v1/cells/"+cell+"/records", ""); r.status != 200 || !strings.Contains(r.body, want) {
			t.Fatalf("read %s through %s: %d %s", cell, via, r.status, r.body)
		}
		if r := routedCall(t, "GET", base[via]+"/v1/cells/"+cell+"/records?barrier=true", ""); r.status != 200 || !strings.Contains(r.body, want) || r.node != owner[cell] {
			t.Fatalf("barrier read %s through %s: %d from %q %s, want served by %s", cell, via, r.status, r.node, r.body, owner[cell])
		}
	}

	// kill -9 n2: each of its cells is appended to through one survivor
	// and read with a barrier through the other, again until both are
	// served (their views of n2 may lag each other by a LIST).
	victim, survivors := "n2", []string{"n1", "n3"}
	var lost []string
	for cell, n := range owner {
		if n == victim {
			lost = append(lost, cell)
		}
	}
	procs[victim].signal(t, syscall.SIGKILL)
	killed := time.Now()
	until := func(what string, f func() routed) {
		for {
			r := f()
			if r.status == 200 {
				if r.node == victim || r.node == "" {
					t.Fatalf("%s after the kill served by %q", what, r.node)
				}
				return
			}
			if r.status != 503 && r.status != 409 {
				t.Fatalf("%s after the kill: %d %s", what, r.status, r.body)
			}
			if time.Since(killed) > ttl+3*time.Second {
				t.Fatalf("%s: not served %v after kill -9 (TTL %v): last answer %d %s", what, time.Since(killed), ttl, r.status, r.body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i, cell := range lost {
		w, rd := survivors[i%2], survivors[(i+1)%2]
		until("append "+cell+" through "+w, func() routed {
			return routedCall(t, "POST", base[w]+"/v1/cells/"+cell+"/append", "after-kill")
		})
		until("barrier read "+cell+" through "+rd, func() routed {
			r := routedCall(t, "GET", base[rd]+"/v1/cells/"+cell+"/records?barrier=true", "")
			if r.status == 200 && !strings.Contains(r.body, b64("rec-"+cell)) {
				t.Fatalf("read %s after the takeover: %s", cell, r.body)
			}
			return r
		})
	}
	worst := time.Since(killed)
	t.Logf("all %d cells of the killed node served through the survivors %v after kill -9 (TTL %v)", len(lost), worst.Round(time.Millisecond), ttl)

	// A 4th node joins: within a minute it holds a share of the cells,
	// handed off to it while appends keep going through n1, and every
	// acknowledged record is intact.
	base["n4"] = waitNode(t, startDeed(t, c.env, "run", "--node", "n4", "--listen", anyPort, "--ttl", ttl.String(), "--fleet-secret-file", secretFile), "n4")
	joined := time.Now()
	acked := map[string][]string{}
	answers := map[int]int{}
	held4 := 0
	for round := 0; ; round++ {
		for i := range 60 {
			cell := fmt.Sprintf("cell-%02d", i)
			data := fmt.Sprintf("join-%s-%d", cell, round)
			r := routedCall(t, "POST", base["n1"]+"/v1/cells/"+cell+"/append", data)
			answers[r.status]++
			switch r.status {
			case 200:
				acked[cell] = append(acked[cell], data)
			case 503, 409: // not applied, or unknown: not counted as written
			default:
				t.Fatalf("append %s during the join: %d %s", cell, r.status, r.body)
			}
		}
		held4 = len(heldCells(t, base["n4"]))
		if held4 >= 60/3/2 {
			break
		}
		if time.Since(joined) > time.Minute {
			t.Fatalf("n4 holds %d of 60 cells a minute after it joined", held4)
		}
		time.Sleep(200 * time.Millisecond)
	}
	took := time.Since(joined)
	count = map[string]int{}
	for _, n := range []string{"n1", "n3", "n4"} {
		count[n] = len(heldCells(t, base[n]))
	}
	for cell, datas := range acked {
		r := routedCall(t, "GET", base["n3"]+"/v1/cells/"+cell+"/records?barrier=true&limit=1000", "")
		if r.status != 200 {
			t.Fatalf("read %s after the join: %d %s", cell, r.status, r.body)
		}
		for _, data := range datas {
			if !strings.Contains(r.body, b64(data)) {
				t.Fatalf("acknowledged record %q of %s missing after the join: %s", data, cell, r.body)
			}
		}
	}
	t.Logf("n4 held %d cells %v after joining (held now %v); appends answered %v; every acknowledged record intact", held4, took.Round(time.Millisecond), count, answers)
}
