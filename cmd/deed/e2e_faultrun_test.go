package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/replication"
)

// The fault run: a black-box minute of a fleet of 4 real daemons on one
// store, with clients appending (half of them with an Idempotency-Key,
// and two clients' appends sent once, so each "no" they get is final) and
// reading with a barrier through random nodes, while a driver pauses
// nodes (SIGSTOP 2 s), kills them (kill -9, restart), partitions one
// (from the store and from its peers, through cutProxy), forces a claim
// from the CLI, moves cells, drains and undrains a node, restarts one with
// SIGTERM, has a 5th node join and leave, and lets cells go idle. It
// checks every answer against the log and prints what the clients were
// told: the refusals by DEED code and HTTP status, and the longest time a
// cell (or a client) went without a successful answer during each
// operation.
//
// It takes over a minute and is not part of `make test`: run it with
// `make fault-run` (or DEED_FAULT_RUN=1 go test -run TestE2EFaultRun -v
// ./cmd/deed). DEED_BIN names the binary to run (default: this tree's,
// built with -race), so that another version's can be measured with the
// same harness: it uses only flags and endpoints that have long existed.
// DEED_FAULT_TTL sets --ttl (default 2s).
func TestE2EFaultRun(t *testing.T) {
	if os.Getenv("DEED_FAULT_RUN") == "" {
		t.Skip("the fault run takes over a minute: make fault-run, or DEED_FAULT_RUN=1")
	}
	bin := os.Getenv("DEED_BIN")
	if bin == "" {
		bin = deedBinary(t)
	}
	ttl := 2 * time.Second
	if v := os.Getenv("DEED_FAULT_TTL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("DEED_FAULT_TTL=%q: %v", v, err)
		}
		ttl = d
	}
	r := newFaultRun(t, bin, ttl)
	r.run()
}

// faultNode is one daemon of the fault run with the proxies that stand
// between it and the store, and between its peers and it.
type faultNode struct {
	store *cutProxy // its DEED_ENDPOINT
	peer  *cutProxy // the address it advertises
}

// faultAppend is one append as the client saw it, over every attempt.
type faultAppend struct {
	cell, value string
	keyed       bool
	once        bool // sent once whatever the answer: its "no" is final, and checked
	acked       bool
	pos         uint64
	maybe       bool // an attempt may have been applied (unknown, or no answer after sending)
}

// faultClient is one client: when it was last answered with success.
type faultClient struct {
	name string
	cell string // the one cell it appends to; "" for a client of many cells
	ok   []time.Time
}

// faultRefusal is one attempt answered other than 2xx, and when.
type faultRefusal struct {
	at       time.Time
	op, code string
}

// faultEvent is one operation of the driver, from its start to the end of
// what it did (a restart: once the node serves again).
type faultEvent struct {
	what     string
	from, to time.Time
}

type faultRun struct {
	t      *testing.T
	bin    string
	ttl    time.Duration
	c      *e2eCluster
	s3     string // the store's host:port
	fleet  *e2eFleet
	nodes  map[string]*faultNode
	secret string // --fleet-secret-file
	last   string // the node the previous operation was done to
	hc     *http.Client

	mu       sync.Mutex
	answers  map[string]int // "op status code applied" → count
	refusals []faultRefusal
	samples  map[string]string // "op status code applied" → the first body
	procs    []*proc           // every daemon started, for DEED_FAULT_LOGS
	attempts map[string]int    // op → count
	appends  []*faultAppend
	clients  []*faultClient
	events   []faultEvent
	began    time.Time
	quiet    bool // mixed clients touch only two cells (the rest go idle)
}

func newFaultRun(t *testing.T, bin string, ttl time.Duration) *faultRun {
	c := newE2EClusterBin(t, bin)
	r := &faultRun{t: t, bin: bin, ttl: ttl, c: c, fleet: newE2EFleet(), nodes: map[string]*faultNode{},
		hc:      &http.Client{Timeout: 5 * time.Second},
		answers: map[string]int{}, attempts: map[string]int{}, samples: map[string]string{}}
	for _, kv := range c.env {
		if v, ok := strings.CutPrefix(kv, envEndpoint+"=http://"); ok {
			r.s3 = v
		}
	}
	return r
}

// start starts node (again), through its proxies, and waits until it
// serves; clients may then use it.
func (r *faultRun) start(node string) {
	t := r.t
	t.Helper()
	fn := r.nodes[node]
	if fn == nil {
		fn = &faultNode{store: newCutProxy(t, r.s3), peer: newCutProxy(t, "")}
		r.nodes[node] = fn
	}
	env := make([]string, 0, len(r.c.env))
	for _, kv := range r.c.env {
		if strings.HasPrefix(kv, envEndpoint+"=") {
			kv = envEndpoint + "=http://" + fn.store.addr
		}
		env = append(env, kv)
	}
	p := startDeedBin(t, r.bin, env, "run", "--node", node, "--listen", anyPort, "--ttl", r.ttl.String(),
		"--fleet-secret-file", r.secret, "--idle-release", "3s", "--advertise", "http://"+fn.peer.addr)
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	direct := reported(t, p, apiListening, bannerWaitLimit)
	fn.peer.setTarget(strings.TrimPrefix(direct, "http://"))
	base := waitNode(t, p, node)
	r.fleet.mu.Lock()
	r.fleet.proc[node] = p
	r.fleet.mu.Unlock()
	r.fleet.setUp(node, base, true)
}

// exited is what peers see of a node whose process ended: its address
// refuses connections.
func (r *faultRun) exited(node string) {
	r.nodes[node].peer.down()
}

func (r *faultRun) restartProxy(node string) {
	r.nodes[node].peer.up(r.t)
}

// count records one attempt's answer.
func (r *faultRun) count(op, node string, status int, code, applied string, body []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts[op]++
	if status/100 == 2 {
		return
	}
	k := fmt.Sprintf("%s\t%d\t%s\t%s", op, status, code, applied)
	r.answers[k]++
	if _, ok := r.samples[k]; !ok {
		r.samples[k] = fmt.Sprintf("%.1fs via %s: %.240s", time.Since(r.began).Seconds(), node, strings.TrimSpace(string(body)))
	}
	r.refusals = append(r.refusals, faultRefusal{at: time.Now(), op: op, code: code})
}

// send makes one attempt and says what it was told: the status (0: no
// answer), the code ("" on success), and whether it was applied ("yes",
// "no", "unknown"). A refused dial sent nothing: applied "no".
func (r *faultRun) send(method, url, body, key string) (int, []byte, string, string) {
	req, _ := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return 0, nil, "no answer: connection refused", "no"
		case errors.As(err, &ne) && ne.Timeout():
			return 0, nil, "no answer: timeout (5s)", "unknown"
		default:
			return 0, nil, "no answer: connection lost", "unknown"
		}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, "no answer: body cut", "unknown"
	}
	if resp.StatusCode/100 == 2 {
		return resp.StatusCode, raw, "", "yes"
	}
	var e client.ErrorBody
	if json.Unmarshal(raw, &e) != nil || e.Code == "" {
		return resp.StatusCode, raw, "(not a DEED error)", "unknown"
	}
	return resp.StatusCode, raw, string(e.Code), string(e.Applied)
}

// appendValue appends value to cell through random nodes until it is
// acknowledged, or an attempt may have been applied and it has no key to
// retry with, or 20 s passed; an append sent once stops at the first
// answer. Every attempt is counted.
func (r *faultRun) appendValue(cl *faultClient, a *faultAppend) {
	key := ""
	if a.keyed {
		key = a.value
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		node, base := r.fleet.pick()
		st, raw, code, applied := r.send("POST", base+"/v1/cells/"+a.cell+"/append", a.value, key)
		r.count("append", node, st, code, applied, raw)
		if st == http.StatusOK {
			var res client.AppendResult
			if err := json.Unmarshal(raw, &res); err != nil {
				r.t.Errorf("append %s to %s: 200 %q: %v", a.value, a.cell, raw, err)
				return
			}
			r.mu.Lock()
			a.acked, a.pos = true, res.Pos
			cl.ok = append(cl.ok, time.Now())
			r.mu.Unlock()
			return
		}
		if applied != "no" {
			r.mu.Lock()
			a.maybe = true
			r.mu.Unlock()
			if !a.keyed {
				return // unknown, and no key to retry with safely
			}
		}
		if a.once || time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Duration(50+rand.N(200)) * time.Millisecond)
	}
}

// barrierRead reads cell after pos through random nodes until answered
// (or 20 s). With want set, the answer must start with want at pos+1: a
// barrier read sees every acknowledged append.
func (r *faultRun) barrierRead(cl *faultClient, cell string, after uint64, want string) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		node, base := r.fleet.pick()
		st, raw, code, applied := r.send("GET", fmt.Sprintf("%s/v1/cells/%s/records?barrier=true&after=%d&limit=1", base, cell, after), "", "")
		r.count("barrier read", node, st, code, applied, raw)
		if st == http.StatusOK {
			var res client.ReadResult
			if err := json.Unmarshal(raw, &res); err != nil {
				r.t.Errorf("read %s: 200 %q: %v", cell, raw, err)
				return
			}
			if want != "" && (len(res.Records) == 0 || res.Records[0].Pos != after+1 || string(res.Records[0].Data) != want) {
				r.t.Errorf("barrier read of %s after %d, acknowledged %q at %d: answered %s", cell, after, want, after+1, raw)
			}
			r.mu.Lock()
			cl.ok = append(cl.ok, time.Now())
			r.mu.Unlock()
			return
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Duration(50+rand.N(200)) * time.Millisecond)
	}
}

const (
	faultCells = 8  // each with a writer of its own: f-0 … f-7
	mixedCells = 16 // shared by the mixed clients: m-00 … m-15
)

func (r *faultRun) client(name, cell string) *faultClient {
	cl := &faultClient{name: name, cell: cell}
	r.mu.Lock()
	r.clients = append(r.clients, cl)
	r.mu.Unlock()
	return cl
}

func (r *faultRun) newAppend(cell, value string, keyed bool) *faultAppend {
	a := &faultAppend{cell: cell, value: value, keyed: keyed}
	r.mu.Lock()
	r.appends = append(r.appends, a)
	r.mu.Unlock()
	return a
}

func (r *faultRun) event(what string, from time.Time) {
	r.mu.Lock()
	r.events = append(r.events, faultEvent{what: what, from: from, to: time.Now()})
	r.mu.Unlock()
	r.t.Logf("%6.1fs  %s (%v)", time.Since(r.began).Seconds(), what, time.Since(from).Round(10*time.Millisecond))
}

// holder is the node holding cell, else a random one of the first four.
func (r *faultRun) holder(cell string) string {
	if n := r.fleet.holderOf(cell); n != "" && n != "n5" {
		return n
	}
	return fmt.Sprintf("n%d", 1+rand.N(4))
}

// other is a node of the first four other than node and the one the
// previous operation was done to (a paused node is fenced for a while:
// not a move's target).
func (r *faultRun) other(node string) string {
	for {
		if n := fmt.Sprintf("n%d", 1+rand.N(4)); n != node && n != r.last {
			return n
		}
	}
}

func (r *faultRun) proc(node string) *proc {
	r.fleet.mu.Lock()
	defer r.fleet.mu.Unlock()
	return r.fleet.proc[node]
}

func (r *faultRun) base(node string) string {
	r.fleet.mu.Lock()
	defer r.fleet.mu.Unlock()
	return r.fleet.all[node]
}

// cli runs a one-shot command of the binary under test against the store.
func (r *faultRun) cli(args ...string) (int, string) {
	ctx, cancel := context.WithTimeout(r.t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.bin, args...)
	cmd.Env = append(os.Environ(), r.c.env...)
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

func (r *faultRun) run() {
	t := r.t
	r.secret = fleetSecretFile(t)
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		r.start(n)
	}
	time.Sleep(r.ttl + r.ttl/2) // every node has seen the others

	stop := make(chan struct{})
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	var wg sync.WaitGroup
	for i := range faultCells {
		cell := fmt.Sprintf("f-%d", i)
		cl := r.client("writer of "+cell, cell)
		wg.Go(func() {
			for j := 0; !stopped(); j++ {
				a := r.newAppend(cell, fmt.Sprintf("%s-%d", cell, j), j%2 == 0)
				r.appendValue(cl, a)
				if a.acked && j%3 == 0 {
					r.barrierRead(cl, cell, a.pos-1, a.value)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	for i := range 2 {
		cl := r.client(fmt.Sprintf("mixed client %d", i), "")
		wg.Go(func() {
			for j := 0; !stopped(); j++ {
				r.mu.Lock()
				span := mixedCells
				if r.quiet {
					span = 2
				}
				r.mu.Unlock()
				cell := fmt.Sprintf("m-%02d", rand.N(span))
				if j%2 == 0 {
					a := r.newAppend(cell, fmt.Sprintf("mixed%d-%d", i, j), false)
					a.once = true
					r.appendValue(cl, a)
				} else {
					r.barrierRead(cl, cell, 0, "")
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}

	r.began = time.Now()
	settle := func() { time.Sleep(3 * time.Second) }
	settle()
	r.event("nothing (baseline)", r.began)

	pause := func(cell string) {
		n := r.holder(cell)
		from := time.Now()
		p := r.proc(n)
		p.signal(t, syscall.SIGSTOP)
		time.Sleep(2 * time.Second)
		p.signal(t, syscall.SIGCONT)
		r.event(fmt.Sprintf("SIGSTOP 2s of %s (holder of %s)", n, cell), from)
		r.last = n
	}
	move := func(cell string) {
		n := r.holder(cell)
		to := r.other(n)
		from := time.Now()
		st, body, _, _ := r.send("POST", r.base(n)+"/v1/cells/"+cell+"/move?to="+to, "", "")
		if st != 200 {
			t.Logf("move %s from %s to %s: %d %s", cell, n, to, st, body)
		}
		r.event(fmt.Sprintf("move of %s from %s to %s", cell, n, to), from)
	}

	pause("f-0")
	settle()
	move("f-1")
	settle()
	{ // kill -9, restart after 1 s
		n := r.holder("f-2")
		from := time.Now()
		p := r.proc(n)
		p.signal(t, syscall.SIGKILL)
		<-p.done
		r.exited(n)
		time.Sleep(time.Second)
		r.restartProxy(n)
		r.start(n)
		r.event(fmt.Sprintf("kill -9 of %s (holder of f-2), restarted after 1s", n), from)
	}
	settle()
	{ // partition from the store and the peers for 2 TTL
		n := r.holder("f-3")
		from := time.Now()
		fn := r.nodes[n]
		fn.store.setCut(true)
		fn.peer.setCut(true)
		time.Sleep(2 * r.ttl)
		fn.store.setCut(false)
		fn.peer.setCut(false)
		r.event(fmt.Sprintf("partition of %s (holder of f-3) from store and peers for %v", n, 2*r.ttl), from)
	}
	settle()
	{
		from := time.Now()
		n := r.holder("f-4")
		if st, out := r.cli("claim", "f-4", "--force"); st != 0 {
			t.Logf("deed claim f-4 --force: exit %d: %s", st, out)
		}
		r.event(fmt.Sprintf("forced claim of f-4 (held by %s) from the CLI", n), from)
	}
	settle()
	{
		n := r.holder("f-5")
		from := time.Now()
		if st, body, _, _ := r.send("POST", r.base(n)+"/v1/node/drain", "", ""); st != 200 {
			t.Logf("drain %s: %d %s", n, st, body)
		}
		time.Sleep(2 * r.ttl)
		if st, body, _, _ := r.send("DELETE", r.base(n)+"/v1/node/drain", "", ""); st != 200 {
			t.Logf("undrain %s: %d %s", n, st, body)
		}
		r.event(fmt.Sprintf("drain of %s (holder of f-5), undrained after %v", n, 2*r.ttl), from)
	}
	settle()
	{
		n := r.holder("f-6")
		from := time.Now()
		p := r.proc(n)
		r.fleet.setUp(n, "", false)
		p.signal(t, syscall.SIGTERM)
		if st := p.wait(t, 40*time.Second); st != 0 {
			t.Logf("%s exited %d after SIGTERM", n, st)
		}
		r.exited(n)
		r.restartProxy(n)
		r.start(n)
		r.event(fmt.Sprintf("SIGTERM of %s (holder of f-6) and restart", n), from)
	}
	settle()
	{
		from := time.Now()
		r.start("n5")
		r.event("join of n5", from)
		time.Sleep(2 * r.ttl)
		from = time.Now()
		r.fleet.setUp("n5", "", false)
		p := r.proc("n5")
		p.signal(t, syscall.SIGTERM)
		if st := p.wait(t, 40*time.Second); st != 0 {
			t.Logf("n5 exited %d after SIGTERM", st)
		}
		r.exited("n5")
		r.fleet.mu.Lock()
		delete(r.fleet.all, "n5")
		r.fleet.mu.Unlock()
		r.event("leave of n5 (SIGTERM)", from)
	}
	settle()
	pause("f-7")
	settle()
	move("f-6")
	settle()
	{
		from := time.Now()
		r.mu.Lock()
		r.quiet = true
		r.mu.Unlock()
		time.Sleep(5 * time.Second)
		r.mu.Lock()
		r.quiet = false
		r.mu.Unlock()
		time.Sleep(2 * time.Second)
		r.event("idle release of m-02 … m-15 (5s untouched) and their next requests", from)
	}
	close(stop)
	wg.Wait()
	elapsed := time.Since(r.began)
	end := time.Now()
	for _, cl := range r.clients {
		cl.ok = append(cl.ok, end) // a client still waiting at the end waited until then
	}
	if dir := os.Getenv("DEED_FAULT_LOGS"); dir != "" {
		for i, p := range r.procs {
			name := fmt.Sprintf("%s/%02d-%s.log", dir, i, p.cmd.Args[3])
			if err := os.WriteFile(name, []byte(p.out.String()), 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	r.check()
	r.report(elapsed)
}

// check holds every answer to the log: an acknowledged append is in it
// exactly once, at its position; one whose every attempt was applied "no"
// is not in it; nothing is in it twice.
func (r *faultRun) check() {
	t := r.t
	b := e2eBucketPrefix(t, r.c, true)
	byCell := map[string][]*faultAppend{}
	for _, a := range r.appends {
		byCell[a.cell] = append(byCell[a.cell], a)
	}
	for cell, as := range byCell {
		recs, err := replication.Read(t.Context(), b, cell, 0, 0)
		if err != nil {
			t.Fatalf("read %s from the store: %v", cell, err)
		}
		at := map[string][]uint64{}
		for _, rec := range recs {
			at[string(rec.Data)] = append(at[string(rec.Data)], uint64(rec.Pos))
		}
		for v, ps := range at {
			if len(ps) > 1 {
				t.Errorf("%s: %q is in the log %d times, at %v", cell, v, len(ps), ps)
			}
		}
		for _, a := range as {
			ps := at[a.value]
			switch {
			case a.acked:
				if len(ps) != 1 || ps[0] != a.pos {
					t.Errorf("%s: %q acknowledged at %d, in the log at %v", cell, a.value, a.pos, ps)
				}
			case !a.maybe:
				if len(ps) != 0 {
					t.Errorf("%s: %q answered applied \"no\" every time, but in the log at %v", cell, a.value, ps)
				}
			}
		}
	}
}

// report prints what the clients were told and how long they waited.
func (r *faultRun) report(elapsed time.Duration) {
	t := r.t
	acked, unknown, refused := 0, 0, 0
	for _, a := range r.appends {
		switch {
		case a.acked:
			acked++
		case a.maybe:
			unknown++
		default:
			refused++
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "fault run of %s, --ttl %v, %v (a loaded machine: wall-clock times)\n", r.bin, r.ttl, elapsed.Round(time.Second))
	fmt.Fprintf(&sb, "appends: %d acknowledged, %d unknown (not retried without a key, or still unknown after 20s), %d never applied; attempts: %d appends, %d barrier reads\n",
		acked, unknown, refused, r.attempts["append"], r.attempts["barrier read"])
	type row struct {
		k string
		n int
	}
	var rows []row
	for k, n := range r.answers {
		rows = append(rows, row{k, n})
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.k, b.k)) })
	fmt.Fprintf(&sb, "\nanswers other than 2xx, per attempt:\n%-13s %-6s %-30s %-8s %s\n", "request", "status", "code", "applied", "count")
	total := 0
	for _, rw := range rows {
		f := strings.Split(rw.k, "\t")
		fmt.Fprintf(&sb, "%-13s %-6s %-30s %-8s %d\n", f[0], f[1], f[2], f[3], rw.n)
		total += rw.n
	}
	fmt.Fprintf(&sb, "%-13s %-6s %-30s %-8s %d\n", "all", "", "", "", total)
	fmt.Fprintf(&sb, "\nthe first answer of each kind:\n")
	for _, rw := range rows {
		fmt.Fprintf(&sb, "%s: %s\n", strings.ReplaceAll(rw.k, "\t", " "), r.samples[rw.k])
	}

	fmt.Fprintf(&sb, "\nlongest time without a successful answer that ended from an operation's start to the next's (3 s after it ends; s: when it ended, from the start), and the answers other than 2xx meanwhile:\n%-72s %-22s %-28s %-34s %s\n",
		"operation", "the cell operated on", "any cell (its writer)", "any client", "not 2xx")
	opCell := regexp.MustCompile(`\bf-\d\b`)
	gap := func(g time.Duration, end time.Time, name string) string {
		if g == 0 {
			return "-"
		}
		return fmt.Sprintf("%v @%.1fs (%s)", g.Round(10*time.Millisecond), end.Sub(r.began).Seconds(), name)
	}
	for i, e := range r.events {
		from, to := e.from, time.Now()
		if i+1 < len(r.events) {
			to = r.events[i+1].from
		}
		if i == 0 {
			from = time.Time{}
		}
		by := map[string]int{}
		for _, f := range r.refusals {
			if !f.at.Before(from) && f.at.Before(to) {
				by[strings.TrimPrefix(f.code, "no answer: ")]++
			}
		}
		var codes []string
		for c, n := range by {
			codes = append(codes, fmt.Sprintf("%s×%d", c, n))
		}
		slices.Sort(codes)
		own := opCell.FindString(e.what)
		var ownGap, cellGap, clientGap time.Duration
		var ownEnd, cellEnd, clientEnd time.Time
		cellName, clientName := "", ""
		for _, cl := range r.clients {
			g, end := longestGap(cl.ok, from, to)
			if cl.cell != "" && cl.cell == own {
				ownGap, ownEnd = g, end
			}
			if cl.cell != "" && g > cellGap {
				cellGap, cellEnd, cellName = g, end, cl.cell
			}
			if g > clientGap {
				clientGap, clientEnd, clientName = g, end, cl.name
			}
		}
		fmt.Fprintf(&sb, "%-72s %-22s %-28s %-34s %s\n", e.what, gap(ownGap, ownEnd, own), gap(cellGap, cellEnd, cellName),
			gap(clientGap, clientEnd, clientName), strings.Join(codes, " "))
	}
	t.Log("\n" + sb.String())
	if out := os.Getenv("DEED_FAULT_REPORT"); out != "" {
		if err := os.WriteFile(out, []byte(sb.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// longestGap is the longest time between consecutive successes in ok
// (sorted) that ended in [from, to): the unavailability an operation
// started then caused or ended.
func longestGap(ok []time.Time, from, to time.Time) (time.Duration, time.Time) {
	var longest time.Duration
	var end time.Time
	for i := 1; i < len(ok); i++ {
		if !ok[i].Before(from) && ok[i].Before(to) && ok[i].Sub(ok[i-1]) > longest {
			longest, end = ok[i].Sub(ok[i-1]), ok[i]
		}
	}
	return longest, end
}
