package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deedkit/deed/daemon/client"
)

// followerSeen is what one follower received, in the order received.
type followerSeen struct {
	mu   sync.Mutex
	recs []client.Record
	errs []string
}

func (s *followerSeen) add(r client.Record) {
	s.mu.Lock()
	s.recs = append(s.recs, r)
	s.mu.Unlock()
}

func (s *followerSeen) last() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.recs) == 0 {
		return 0
	}
	return s.recs[len(s.recs)-1].Pos
}

// followSSE reads an event stream of cell from base (Accept:
// text/event-stream, ?follow=true) into seen until ctx ends. A stream
// that ends or fails is reopened with Last-Event-ID, as an EventSource
// does, and counted in seen.errs: this test expects none.
func followSSE(ctx context.Context, base, cell string, seen *followerSeen) {
	after := uint64(0)
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/cells/"+cell+"/records?follow=true", nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Last-Event-ID", strconv.FormatUint(after, 10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				seen.mu.Lock()
				seen.errs = append(seen.errs, "connect: "+err.Error())
				seen.mu.Unlock()
				time.Sleep(time.Second)
			}
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		var event, data string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if event == "error" {
					seen.mu.Lock()
					seen.errs = append(seen.errs, "event error: "+data)
					seen.mu.Unlock()
				} else if data != "" {
					var rec client.Record
					if json.Unmarshal([]byte(data), &rec) == nil {
						seen.add(rec)
						after = rec.Pos
					}
				}
				event, data = "", ""
			case strings.HasPrefix(line, "event:"):
				event = strings.TrimSpace(line[len("event:"):])
			case strings.HasPrefix(line, "data:"):
				data = strings.TrimSpace(line[len("data:"):])
			}
		}
		resp.Body.Close()
		if ctx.Err() == nil {
			seen.mu.Lock()
			seen.errs = append(seen.errs, fmt.Sprintf("stream ended after %d: %v", after, sc.Err()))
			seen.mu.Unlock()
		}
	}
}

// Two followers of one cell — an event stream and a long-polling
// client.Follow — connected to a node that never holds it (drained from
// the start), while a writer appends through the other nodes and the
// cell's holder moves it, is drained, and is killed (SIGKILL) and
// restarted: each follower receives the whole log, every record once, in
// order, with no gap, every acknowledged append among them at its
// position; the event stream never breaks.
func TestE2EFollowersThroughMovesDrainsAndKills(t *testing.T) {
	if testing.Short() {
		t.Skip("half a minute of a fleet of real processes")
	}
	c := newE2ECluster(t)
	secretFile := fleetSecretFile(t)
	const ttl = 3 * time.Second
	start := func(n string) *proc {
		return startDeed(t, c.env, "run", "--node", n, "--listen", anyPort, "--ttl", ttl.String(), "--fleet-secret-file", secretFile)
	}
	procs := map[string]*proc{}
	var mu sync.Mutex
	bases := map[string]string{}
	for _, n := range []string{"n1", "n2", "n3"} {
		procs[n] = start(n)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		bases[n] = waitNode(t, procs[n], n)
	}
	base := func(n string) string { mu.Lock(); defer mu.Unlock(); return bases[n] }
	hc := &http.Client{Timeout: 60 * time.Second}
	call := func(method, url, body string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	time.Sleep(ttl + ttl/2) // every node sees the others
	began := time.Now()
	step := func(what string) { t.Logf("%v: %s", time.Since(began).Round(time.Millisecond), what) }

	// n3 serves the followers and never holds the cell: drained, no cell
	// is placed on it.
	if st, body := call("POST", base("n3")+"/v1/node/drain", ""); st != 200 {
		t.Fatalf("drain n3: %d %s", st, body)
	}
	const cell = "followed"
	if st, body := call("POST", base("n1")+"/v1/cells/"+cell+"/claim", ""); st != 200 {
		t.Fatalf("claim on n1: %d %s", st, body)
	}
	if st, body := call("POST", base("n1")+"/v1/cells/"+cell+"/append", "first"); st != 200 {
		t.Fatalf("first append: %d %s", st, body)
	}
	fctx, stopFollowers := context.WithCancel(t.Context())
	defer stopFollowers()
	var sse, poll followerSeen
	var fwg sync.WaitGroup
	fwg.Go(func() { followSSE(fctx, base("n3"), cell, &sse) })
	cl, err := client.New(base("n3"), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fwg.Go(func() {
		for rec, err := range cl.Follow(fctx, cell, 0) {
			if err != nil {
				poll.mu.Lock()
				poll.errs = append(poll.errs, err.Error())
				poll.mu.Unlock()
				return
			}
			poll.add(rec)
		}
	})

	// The writer appends through n1 and n2, whichever is up.
	acked := map[string]uint64{} // payload → position
	appends, failed := 0, 0
	stopWriter := make(chan struct{})
	var wwg sync.WaitGroup
	wwg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopWriter:
				return
			default:
			}
			node := []string{"n1", "n2"}[rand.N(2)]
			payload := fmt.Sprintf("w-%d", i)
			st, body := call("POST", base(node)+"/v1/cells/"+cell+"/append", payload)
			mu.Lock()
			appends++
			if st == 200 {
				var res client.AppendResult
				if json.Unmarshal([]byte(body), &res) == nil {
					acked[payload] = res.Pos
				}
			} else {
				failed++
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	})
	holder := func() string {
		for _, n := range []string{"n1", "n2", "n3"} {
			if st, body := call("GET", base(n)+"/v1/cells", ""); st == 200 && strings.Contains(body, `"`+cell+`"`) {
				return n
			}
		}
		return ""
	}
	other := func(n string) string {
		if n == "n1" {
			return "n2"
		}
		return "n1"
	}
	time.Sleep(time.Second)

	h := holder()
	if h == "" || h == "n3" {
		t.Fatalf("holder before the move: %q", h)
	}
	if st, body := call("POST", base(h)+"/v1/cells/"+cell+"/move?to="+other(h), ""); st != 200 {
		t.Fatalf("move from %s: %d %s", h, st, body)
	}
	step("moved from " + h)
	time.Sleep(time.Second)

	h = holder()
	if st, body := call("POST", base(h)+"/v1/node/drain", ""); st != 200 {
		t.Fatalf("drain %s: %d %s", h, st, body)
	}
	for deadline := time.Now().Add(2 * ttl); holder() == h && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
	}
	step("drained " + h)
	if st, body := call("DELETE", base(h)+"/v1/node/drain", ""); st != 200 {
		t.Fatalf("undrain %s: %d %s", h, st, body)
	}
	time.Sleep(time.Second)

	h = holder()
	if h == "" || h == "n3" {
		t.Fatalf("holder before the kill: %q", h)
	}
	procs[h].signal(t, syscall.SIGKILL)
	procs[h].wait(t, 10*time.Second)
	step("killed " + h)
	time.Sleep(ttl)
	procs[h] = start(h)
	b := waitNode(t, procs[h], h)
	mu.Lock()
	bases[h] = b
	mu.Unlock()
	step("restarted " + h)
	time.Sleep(2 * time.Second)
	close(stopWriter)
	wwg.Wait()

	// The whole log, as a plain read gives it.
	var log []client.Record
	for after := uint64(0); ; {
		st, body := call("GET", fmt.Sprintf("%s/v1/cells/%s/records?after=%d&limit=1000", base("n3"), cell, after), "")
		var rr client.ReadResult
		if st != 200 || json.Unmarshal([]byte(body), &rr) != nil {
			t.Fatalf("read the log: %d %s", st, body)
		}
		if len(rr.Records) == 0 {
			break
		}
		log = append(log, rr.Records...)
		after = rr.NextAfter
	}
	tail := log[len(log)-1].Pos
	for deadline := time.Now().Add(30 * time.Second); (sse.last() < tail || poll.last() < tail) && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
	}
	stopFollowers()
	fwg.Wait()
	step(fmt.Sprintf("log of %d records; %d appends, %d acknowledged, %d refused or unknown", len(log), appends, len(acked), failed))
	if st, body := call("GET", base("n3")+"/metrics", ""); st == 200 {
		for l := range strings.SplitSeq(body, "\n") {
			if strings.HasPrefix(l, "deed_forwarded_total") {
				t.Logf("n3 (the followers' node): %s", l) // "lost": reads cut by the kill, retried in the loop
			}
		}
	}

	for i, rec := range log {
		if rec.Pos != uint64(i)+1 {
			t.Fatalf("the log has position %d at index %d: a gap", rec.Pos, i)
		}
	}
	at := map[uint64]string{}
	for _, rec := range log {
		at[rec.Pos] = string(rec.Data)
	}
	for payload, pos := range acked {
		if at[pos] != payload {
			t.Errorf("acknowledged %q at %d, the log has %q there", payload, pos, at[pos])
		}
	}
	for _, f := range []struct {
		name string
		seen *followerSeen
	}{{"event stream", &sse}, {"client.Follow", &poll}} {
		f.seen.mu.Lock()
		got, errs := slices.Clone(f.seen.recs), slices.Clone(f.seen.errs)
		f.seen.mu.Unlock()
		if len(errs) > 0 {
			t.Errorf("%s: %d breaks: %q", f.name, len(errs), errs)
		}
		if len(got) != len(log) {
			t.Errorf("%s received %d records, the log has %d", f.name, len(got), len(log))
		}
		for i := range min(len(got), len(log)) {
			if got[i].Pos != log[i].Pos || string(got[i].Data) != string(log[i].Data) {
				t.Fatalf("%s: record %d is %d %q, the log's is %d %q", f.name, i, got[i].Pos, got[i].Data, log[i].Pos, log[i].Data)
			}
		}
	}
	if len(acked) < 20 {
		t.Errorf("only %d appends acknowledged: the writer proved little", len(acked))
	}
}
