package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/daemon/daemontest"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3/s3test"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// cellEnv is a fresh HTTP fake store and the environment that points the
// CLI at it, under the bucket prefix "tenant".
type cellEnv struct {
	tg  s3test.Target
	env map[string]string
	// b is scoped to the prefix, as the CLI sees the bucket.
	b bucket.Bucket
}

func newCellEnv(t *testing.T) *cellEnv {
	t.Helper()
	tg := s3test.HTTPFake(t)
	loc := tg.Loc
	loc.Prefix = "tenant"
	return &cellEnv{
		tg:  tg,
		env: map[string]string{envBucket: loc.String(), envEndpoint: tg.Endpoint},
		b:   bucket.WithPrefix(tg.Bucket, "tenant"),
	}
}

func (e *cellEnv) run(t *testing.T, args ...string) result {
	t.Helper()
	return deed(t, t.Context(), e.env, args...)
}

// keys lists every object in the whole bucket, prefix or not.
func (e *cellEnv) keys(t *testing.T) []string {
	t.Helper()
	page, err := bucket.ListAll(t.Context(), e.tg.Bucket, bucket.ListInput{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range page.Objects {
		out = append(out, o.Key)
	}
	return out
}

// record reads a cell's ownership record.
func (e *cellEnv) record(t *testing.T, cell string) (owner.Record, bool) {
	t.Helper()
	rec, ok, err := owner.Inspect(t.Context(), e.b, cell)
	if err != nil {
		t.Fatal(err)
	}
	return rec, ok
}

// bgRun is a CLI invocation running in the background.
type bgRun struct {
	cancel      context.CancelFunc
	out, errOut *daemontest.SyncBuffer
	done        chan int
	once        sync.Once
	res         result
}

func (e *cellEnv) start(t *testing.T, args ...string) *bgRun {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r := &bgRun{cancel: cancel, out: &daemontest.SyncBuffer{}, errOut: &daemontest.SyncBuffer{}, done: make(chan int, 1)}
	go func() {
		r.done <- run(ctx, invocation{Args: args, Stdout: r.out, Stderr: r.errOut,
			Getenv: func(k string) string { return e.env[k] }, Credentials: s3test.Credentials()})
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// waitOut waits until stdout contains s.
func (r *bgRun) waitOut(t *testing.T, s string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !strings.Contains(r.out.String(), s) {
		select {
		case st := <-r.done:
			r.done <- st
			t.Fatalf("exited %d before printing %q\nstdout: %s\nstderr: %s", st, s, r.out, r.errOut)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %v\nstdout: %s\nstderr: %s", s, limit, r.out, r.errOut)
		}
	}
}

// wait waits for the run to end by itself.
func (r *bgRun) wait(t *testing.T, limit time.Duration) result {
	t.Helper()
	select {
	case st := <-r.done:
		r.done <- st
	case <-time.After(limit):
		t.Fatalf("still running after %v\nstdout: %s\nstderr: %s", limit, r.out, r.errOut)
	}
	return r.stop(t)
}

// stop interrupts the run (as SIGINT would) and returns its result.
func (r *bgRun) stop(t *testing.T) result {
	r.once.Do(func() {
		r.cancel()
		select {
		case st := <-r.done:
			r.res = result{st, r.out.String(), r.errOut.String()}
		case <-time.After(30 * time.Second):
			t.Errorf("did not stop within 30s\nstdout: %s\nstderr: %s", r.out, r.errOut)
		}
	})
	return r.res
}

func wantExit(t *testing.T, r result, status int, code errcode.Code) {
	t.Helper()
	if r.status != status {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.status, status, r.stdout, r.stderr)
	}
	if code != "" && !strings.HasPrefix(lastLine(r.stderr), string(code)+" ") {
		t.Fatalf("stderr %q: its error does not start with %s", r.stderr, code)
	}
}

// lastLine is the last non-empty line of s: the error, after any log lines.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	return v
}

// putNodeLease writes a node lease that nobody renews: a crashed node.
func (e *cellEnv) putNodeLease(t *testing.T, node string, ttl time.Duration, released bool) {
	t.Helper()
	body := fmt.Sprintf(`{"node":%q,"incarnation":"ghost-%d","addr":"http://%s:7480","ttl_ms":%d,"seq":1,"at_ms":%d,"released":%v}`,
		node, time.Now().UnixNano(), node, ttl.Milliseconds(), time.Now().UnixMilli(), released)
	if _, err := e.b.Put(t.Context(), owner.NodeKey(node), []byte(body), bucket.None); err != nil {
		t.Fatal(err)
	}
}

func TestClaimShowRelease(t *testing.T) {
	e := newCellEnv(t)

	// A one-shot claim is a fence: a new epoch, the log sealed, and the
	// record released, since nothing holds the cell afterwards.
	r := e.run(t, "claim", "c1", "--node", "a", "--json")
	wantExit(t, r, 0, "")
	if v := decode[map[string]any](t, r.stdout); v["cell"] != "c1" || v["node"] != "a" || v["epoch"] != 1.0 || v["held"] != false || len(v) != 4 {
		t.Fatalf("claim = %v", v)
	}
	r = e.run(t, "show", "c1", "--json")
	wantExit(t, r, 0, "")
	sv := decode[showView](t, r.stdout)
	sv.ObservedForMS = 0 // one look: the time of one GET
	if sv != (showView{Cell: "c1", Epoch: 1, Released: true, Claimed: true}) {
		t.Fatalf("show = %+v", sv)
	}
	// The record and the seal of its own (empty) epoch: epoch 1 (the claim
	// created the record) needs no announcement.
	if keys := e.keys(t); strings.Join(keys, ",") != "tenant/cells/c1/ltx/e1/0000000000000001.ltx,tenant/cells/c1/own.json" {
		t.Fatalf("a one-shot claim wrote %v", keys)
	}
	// Each one fences again; the text says that nobody holds the cell.
	wantExit(t, e.run(t, "claim", "c1", "--node", "b"), 0, "")
	r = e.run(t, "claim", "c1")
	wantExit(t, r, 0, "")
	if r.stdout != "fenced cell c1 at epoch 3 (no holder; the next claimer takes it at once)\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
	// A holder to release: b, through the owner API (as a daemon would).
	nb, err := owner.NewNode(e.b, owner.Config{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nb.Claim(t.Context(), "c1", owner.ClaimOptions{}); err != nil {
		t.Fatal(err)
	}

	r = e.run(t, "release", "c1", "--node", "a")
	wantExit(t, r, 4, errcode.CodeNotHolder)
	if !strings.Contains(r.stderr, "held by b at epoch 4") {
		t.Errorf("stderr %q does not name the holder", r.stderr)
	}
	r = e.run(t, "release", "c1", "--node", "b", "--json")
	wantExit(t, r, 0, "")
	if v := decode[map[string]any](t, r.stdout); v["released"] != true || v["epoch"] != 4.0 || v["node"] != "" {
		t.Fatalf("release = %v", v)
	}
	if rec, _ := e.record(t, "c1"); !rec.Released() || rec.Epoch != 4 {
		t.Fatalf("record after release: %+v", rec)
	}
	wantExit(t, e.run(t, "release", "c1", "--node", "b"), 0, "") // no-op
	r = e.run(t, "show", "c1")
	wantExit(t, r, 0, "")
	if !strings.Contains(r.stdout, "released at epoch 4") {
		t.Errorf("show: %q", r.stdout)
	}

	// --force releases whoever holds it.
	if _, err := nb.Claim(t.Context(), "c1", owner.ClaimOptions{}); err != nil {
		t.Fatal(err)
	}
	wantExit(t, e.run(t, "release", "c1", "--node", "z", "--force"), 0, "")
	if rec, _ := e.record(t, "c1"); !rec.Released() {
		t.Fatalf("record after forced release: %+v", rec)
	}

	// A cell never claimed.
	wantExit(t, e.run(t, "release", "never", "--node", "a"), 4, errcode.CodeNotHolder)
	r = e.run(t, "show", "never", "--json")
	wantExit(t, r, 0, "")
	if v := decode[map[string]any](t, r.stdout); v["claimed"] != false || v["epoch"] != 0.0 {
		t.Fatalf("show never = %v", v)
	}

	// A corrupt record: show and release refuse with DEED-E030 (exit 1).
	if _, err := e.b.Put(t.Context(), owner.CellKey("junk"), []byte("{not json"), bucket.None); err != nil {
		t.Fatal(err)
	}
	wantExit(t, e.run(t, "show", "junk"), 1, errcode.CodeCorruptOwner)
	wantExit(t, e.run(t, "release", "junk", "--node", "a"), 1, errcode.CodeCorruptOwner)
	wantExit(t, e.run(t, "claim", "junk", "--node", "a"), 1, errcode.CodeCorruptOwner)
}

func TestClaimHoldWaitRelease(t *testing.T) {
	e := newCellEnv(t)
	hold := e.start(t, "claim", "c", "--node", "a", "--hold", "--ttl", "1s", "--json")
	hold.waitOut(t, `"epoch":1`, 10*time.Second)

	r := e.run(t, "show", "c", "--json")
	wantExit(t, r, 0, "")
	if sv := decode[showView](t, r.stdout); !sv.OwnerAlive || sv.Node != "a" || sv.OwnerAddr != "" {
		t.Fatalf("show while held = %+v", sv)
	}
	r = e.run(t, "claim", "c", "--node", "b", "--ttl", "1s")
	wantExit(t, r, 4, errcode.CodeHeld)
	if !strings.Contains(r.stderr, "held by live node a (unknown address) at epoch 1") {
		t.Errorf("stderr %q does not name the owner and its address", r.stderr)
	}
	// A live, renewing owner is not taken over by waiting past its TTL.
	start := time.Now()
	r = e.run(t, "claim", "c", "--node", "b", "--ttl", "1s", "--wait", "1500ms")
	wantExit(t, r, 4, errcode.CodeHeld)
	if d := time.Since(start); d < 1500*time.Millisecond || !strings.Contains(r.stderr, "still held after waiting 1.5s") {
		t.Fatalf("waited %v: %s", d, r.stderr)
	}

	// A waiter gets the cell as soon as the holder releases it.
	waiter := e.start(t, "claim", "c", "--node", "b", "--ttl", "1s", "--wait", "20s", "--json")
	time.Sleep(300 * time.Millisecond)
	released := time.Now()
	if res := hold.stop(t); res.status != 0 {
		t.Fatalf("hold: exit %d\n%s", res.status, res.stderr)
	}
	res := waiter.wait(t, 5*time.Second)
	wantExit(t, res, 0, "")
	if v := decode[map[string]any](t, res.stdout); v["node"] != "b" || v["epoch"] != 2.0 {
		t.Fatalf("waiter claim = %v", v)
	}
	t.Logf("waiter claimed %v after the release", time.Since(released))
	// The holder released its node lease too.
	obj, err := e.b.Get(t.Context(), owner.NodeKey("a"), 0)
	if err != nil || !strings.Contains(string(obj.Body), `"released":true`) {
		t.Fatalf("node lease of a after hold: %s %v", obj.Body, err)
	}
}

func TestClaimWaitTakesOverDeadNode(t *testing.T) {
	e := newCellEnv(t)
	// ghost holds the cell and has a node lease that nobody renews.
	ghost, err := owner.NewNode(e.b, owner.Config{Name: "ghost"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ghost.Claim(t.Context(), "c", owner.ClaimOptions{}); err != nil {
		t.Fatal(err)
	}
	e.putNodeLease(t, "ghost", time.Second, false)

	// One look cannot tell it is dead.
	r := e.run(t, "claim", "c", "--node", "b", "--ttl", "1s")
	wantExit(t, r, 4, errcode.CodeHeld)
	if !strings.Contains(r.stderr, "live node ghost (http://ghost:7480)") {
		t.Errorf("stderr %q", r.stderr)
	}
	// Watching it unchanged for TTL+margin does.
	start := time.Now()
	r = e.run(t, "claim", "c", "--node", "b", "--ttl", "1s", "--wait", "10s")
	wantExit(t, r, 0, "")
	took := time.Since(start)
	if took < 1100*time.Millisecond || took > 5*time.Second {
		t.Errorf("took over after %v, want just over TTL+margin (1.1s)", took)
	}
	// A one-shot claim fences: the record is released at the new epoch.
	if rec, _ := e.record(t, "c"); !rec.Released() || rec.Epoch != 2 {
		t.Fatalf("record %+v", rec)
	}
}

func TestClaimHoldLeaseLost(t *testing.T) {
	e := newCellEnv(t)
	hold := e.start(t, "claim", "c", "--node", "a", "--hold", "--ttl", "1s")
	hold.waitOut(t, "holding cell c for node a at epoch 1", 10*time.Second)
	wantExit(t, e.run(t, "claim", "c", "--node", "b", "--force"), 0, "")
	res := hold.wait(t, 5*time.Second)
	wantExit(t, res, 3, errcode.CodeSuperseded)
	// The holder's watch may read the record while b holds it (between the
	// forced claim and its release) or after: both answers name epoch 2.
	if !strings.Contains(res.stderr, "fenced by a claim at epoch 2 (no holder now)") &&
		!strings.Contains(res.stderr, "superseded: now held by node b at epoch 2") {
		t.Errorf("stderr %q", res.stderr)
	}
	// The holder did not write over the fence on its way out.
	if rec, _ := e.record(t, "c"); !rec.Released() || rec.Epoch != 2 {
		t.Fatalf("record %+v", rec)
	}
}

func TestNodesWatch(t *testing.T) {
	e := newCellEnv(t)
	e.putNodeLease(t, "ghost", time.Second, false)
	e.putNodeLease(t, "gone", time.Second, true)
	hold := e.start(t, "claim", "c", "--node", "live", "--hold", "--ttl", "1s")
	hold.waitOut(t, "holding", 10*time.Second)

	states := func(r result) map[string]nodeRow {
		t.Helper()
		wantExit(t, r, 0, "")
		out := map[string]nodeRow{}
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			row := decode[nodeRow](t, line)
			out[row.Node] = row
		}
		return out
	}
	// One look: the released node is dead, the others cannot be judged.
	s := states(e.run(t, "nodes", "--ttl", "1s", "--json"))
	if s["gone"].State != "released" || s["gone"].Alive || s["ghost"].State != "unknown" || !s["ghost"].Alive ||
		s["live"].State != "unknown" || !s["live"].Alive || s["ghost"].Addr != "http://ghost:7480" || s["live"].TTLMS != 1000 {
		t.Fatalf("one look: %+v", s)
	}
	r := e.run(t, "nodes", "--ttl", "1s")
	if !strings.Contains(r.stdout, "ghost  unknown") || !strings.Contains(r.stdout, "--watch 1.1s or longer") {
		t.Errorf("text:\n%s", r.stdout)
	}
	// Watching for longer than TTL+margin tells the renewing node from the dead one.
	s = states(e.run(t, "nodes", "--ttl", "1s", "--watch", "1500ms", "--json"))
	if s["live"].State != "alive" || !s["live"].Alive || s["ghost"].State != "dead" || s["ghost"].Alive ||
		s["ghost"].UnchangedMS < 1100 || s["ghost"].WatchedMS < 1500 {
		t.Fatalf("watched: %+v", s)
	}
	wantExit(t, e.run(t, "nodes", "--ttl", "0s"), 2, errcode.CodeBadRequest)
}

// smallPages forces two entries per LIST page.
type smallPages struct{ bucket.Bucket }

func (s smallPages) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	in.MaxKeys = 2
	return s.Bucket.List(ctx, in)
}

func TestLs(t *testing.T) {
	e := newCellEnv(t)
	n, err := owner.NewNode(e.b, owner.Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 7 {
		cell := fmt.Sprintf("t-%02d", i)
		want = append(want, cell)
		l, err := n.Claim(t.Context(), cell, owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := l.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
	wantExit(t, e.run(t, "claim", "other", "--node", "b"), 0, "")
	// Files but no record, and a record that does not parse.
	if _, err := e.b.Put(t.Context(), "cells/t-norec/ltx/e1/0000000000000001.ltx", []byte("x"), bucket.None); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Put(t.Context(), owner.CellKey("t-junk"), []byte("junk"), bucket.None); err != nil {
		t.Fatal(err)
	}

	// Pagination: every cell once, in order, across pages of two.
	var got []string
	if err := listCells(t.Context(), smallPages{e.b}, "t-", func(cells []string) error {
		if len(cells) > 2 {
			t.Errorf("page of %d", len(cells))
		}
		got = append(got, cells...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != strings.Join(append(want, "t-junk", "t-norec"), ",") {
		t.Fatalf("listCells = %v", got)
	}

	r := e.run(t, "ls", "--prefix", "t-", "--json")
	wantExit(t, r, 0, "")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 9 {
		t.Fatalf("%d lines:\n%s", len(lines), r.stdout)
	}
	first, junk, norec := decode[lsRow](t, lines[0]), decode[lsRow](t, lines[7]), decode[lsRow](t, lines[8])
	second := decode[lsRow](t, lines[1])
	if first != (lsRow{Cell: "t-00", Epoch: 1, Released: true, Claimed: true}) ||
		second != (lsRow{Cell: "t-01", Node: "a", Epoch: 1, Claimed: true}) ||
		junk.Cell != "t-junk" || !strings.HasPrefix(junk.Error, "DEED-E030") ||
		norec != (lsRow{Cell: "t-norec"}) {
		t.Fatalf("rows: %+v %+v %+v %+v", first, second, junk, norec)
	}
	r = e.run(t, "ls")
	wantExit(t, r, 0, "")
	for _, want := range []string{"CELL", "other", "t-00   -     1      released", "t-01   a     1      held", "t-norec  -     0      no record"} {
		if !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("ls lacks %q:\n%s", want, r.stdout)
		}
	}
	wantExit(t, e.run(t, "ls", "--prefix", "a/b"), 2, errcode.CodeInvalidName)
}

// TestBadNamesWriteNothing: a bad cell or node name is DEED-E001, exit 2,
// before any request: nothing is written to the store.
func TestBadNamesWriteNothing(t *testing.T) {
	e := newCellEnv(t)
	for _, args := range [][]string{
		{"claim", "bad/name", "--node", "a"},
		{"claim", "..", "--node", "a", "--hold"},
		{"claim", "ok", "--node", "bad name"},
		{"claim", "ok", "--node", "a/b", "--hold"},
		{"release", "a b", "--node", "a"},
		{"release", "ok", "--node", ""},
		{"show", "x/y"},
		{"show", strings.Repeat("x", 201)},
		{"exec", "bad/name", "--node", "a", "--", "true"},
		{"exec", "ok", "--node", "a:b", "--", "true"},
		{"gc", "no/pe"},
	} {
		r := e.run(t, args...)
		if r.status != 2 || !strings.HasPrefix(r.stderr, "DEED-E001 ") || r.stdout != "" {
			t.Errorf("deed %q: exit %d stdout %q stderr %q, want exit 2 and DEED-E001 only", args, r.status, r.stdout, r.stderr)
		}
	}
	r := e.run(t, "--json", "claim", "a%b", "--node", "n")
	if e := decode[map[string]string](t, r.stderr); r.status != 2 || e["code"] != "DEED-E001" {
		t.Errorf("--json: exit %d %q", r.status, r.stderr)
	}
	if keys := e.keys(t); len(keys) != 0 {
		t.Fatalf("bad names wrote %v", keys)
	}
}

func TestGC(t *testing.T) {
	e := newCellEnv(t)
	ctx := t.Context()
	// A cell with 5 records, a snapshot over the first 3 transaction files,
	// sealed by Close.
	n, err := owner.NewNode(e.b, owner.Config{Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := n.Claim(ctx, "snap", owner.ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lg, err := replication.Open(ctx, e.b, l)
	if err != nil {
		t.Fatal(err)
	}
	var last replication.Result
	for i := range 5 {
		if last, err = lg.Append(ctx, l, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lg.Snapshot(ctx, l, last.TxID-2, []byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := lg.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wantExit(t, e.run(t, "claim", "plain", "--node", "w"), 0, "")
	// A key deed never writes: ignored, kept, and listed by --dry-run.
	const stray = "cells/snap/ltx/e5000000000/junk"
	if _, err := e.b.Put(ctx, stray, []byte("junk"), bucket.None); err != nil {
		t.Fatal(err)
	}
	before := e.keys(t)
	// The records were written without keys: the idempotency window may go.

	r := e.run(t, "gc", "snap", "--dry-run", "--json", "--drop-key-window")
	wantExit(t, r, 0, "")
	v := decode[gcView](t, r.stdout)
	if !v.DryRun || !strings.HasSuffix(v.Snapshot, ".snapshot") || len(v.Deleted) != 3 || v.Bytes == 0 || !slices.Equal(v.Strays, []string{stray}) {
		t.Fatalf("dry run = %+v", v)
	}
	if after := e.keys(t); len(after) != len(before) {
		t.Fatalf("dry run deleted %d objects", len(before)-len(after))
	}
	r = e.run(t, "gc", "snap", "--dry-run", "--drop-key-window")
	if !strings.Contains(r.stdout, "snap: would delete 3 files") || !strings.Contains(r.stdout, "  "+v.Deleted[0]) ||
		!strings.Contains(r.stdout, "1 stray keys") || !strings.Contains(r.stdout, "  "+stray) {
		t.Errorf("dry run text:\n%s", r.stdout)
	}

	r = e.run(t, "gc", "--all", "--json", "--drop-key-window")
	wantExit(t, r, 0, "")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("gc --all:\n%s", r.stdout)
	}
	p, s := decode[gcView](t, lines[0]), decode[gcView](t, lines[1])
	if p.Cell != "plain" || p.Snapshot != "" || len(p.Deleted) != 0 || s.Cell != "snap" || strings.Join(s.Deleted, ",") != strings.Join(v.Deleted, ",") || s.DryRun {
		t.Fatalf("gc --all = %+v %+v", p, s)
	}
	if after := e.keys(t); len(after) != len(before)-3 {
		t.Fatalf("gc deleted %d objects, want 3", len(before)-len(after))
	}
	// Every record after the snapshot is still read back.
	recs, err := replication.Read(ctx, e.b, "snap", replication.Pos(last.Pos-2), 0)
	if err != nil || len(recs) != 2 {
		t.Fatalf("read after gc: %v %v", recs, err)
	}
	r = e.run(t, "gc", "snap")
	wantExit(t, r, 0, "")
	if !strings.Contains(r.stdout, "snap: deleted 0 files") {
		t.Errorf("second gc: %s", r.stdout)
	}

	wantExit(t, e.run(t, "gc"), 2, errcode.CodeBadRequest)
	wantExit(t, e.run(t, "gc", "snap", "--all"), 2, errcode.CodeBadRequest)
}

// TestClaimReleaseNeverActAsLiveNode: claim and release under an explicit
// --node that a live process renews are refused (DEED-E020); --as-node
// releases on purpose; a one-shot claim without --node is a fence under
// its own id, and needs --force against a live owner.
func TestClaimReleaseNeverActAsLiveNode(t *testing.T) {
	e := newCellEnv(t)
	hold := e.start(t, "claim", "c", "--node", "d1", "--hold", "--ttl", "1s")
	hold.waitOut(t, "holding cell c for node d1 at epoch 1", 10*time.Second)

	// claim and exec have no --as-node: their refusals say what works.
	for _, args := range [][]string{
		{"claim", "c", "--node", "d1"},
		{"claim", "c", "--node", "d1", "--hold"},
		{"exec", "c", "--node", "d1", "--", "true"},
	} {
		r := e.run(t, args...)
		wantExit(t, r, 4, errcode.CodeHeld)
		if !strings.Contains(r.stderr, "node id d1 is in use by a live process") || strings.Contains(r.stderr, "as-node") ||
			!strings.Contains(r.stderr, "omit --node to "+args[0]+" under an id of your own") || !strings.Contains(r.stderr, "POST /v1/cells/CELL/claim") {
			t.Errorf("%s as a live node: %q", strings.Join(args, " "), r.stderr)
		}
	}
	r := e.run(t, "release", "c", "--node", "d1")
	wantExit(t, r, 4, errcode.CodeHeld)
	if !strings.Contains(r.stderr, "--as-node d1") {
		t.Errorf("release as a live node: %q", r.stderr)
	}
	r = e.run(t, "claim", "c")
	wantExit(t, r, 4, errcode.CodeHeld)
	if !strings.Contains(r.stderr, "held by live node d1") {
		t.Errorf("claim of a live owner's cell: %q", r.stderr)
	}
	wantExit(t, e.run(t, "release", "c"), 4, errcode.CodeNotHolder)
	wantExit(t, e.run(t, "release", "c", "--node", "d1"), 4, errcode.CodeHeld)
	wantExit(t, e.run(t, "release", "c", "--node", "d1", "--as-node", "d1"), 2, errcode.CodeBadRequest)
	if rec, _ := e.record(t, "c"); rec.Node != "d1" || rec.Epoch != 1 {
		t.Fatalf("refused commands changed the record: %+v", rec)
	}
	r = e.run(t, "release", "c", "--as-node", "d1")
	wantExit(t, r, 0, "")
	res := hold.wait(t, 10*time.Second)
	wantExit(t, res, 3, errcode.CodeSuperseded)
}
