package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
)

func TestExecEnvAndStatus(t *testing.T) {
	e := newCellEnv(t)
	r := e.run(t, "exec", "job", "--node", "e1", "--ttl", "1s", "--", "env")
	wantExit(t, r, 0, "")
	for _, want := range []string{"DEED_CELL=job\n", "DEED_EPOCH=1\n", "DEED_NODE=e1\n", "DEED_PREFIX=tenant/cells/job/ltx/e1/\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("child environment lacks %q", want)
		}
	}
	if r.stderr != "" {
		t.Errorf("stderr %q", r.stderr)
	}
	// Released afterwards: the cell and the node lease.
	if rec, _ := e.record(t, "job"); !rec.Released() || rec.Epoch != 1 {
		t.Fatalf("record after exec: %+v", rec)
	}
	obj, err := e.b.Get(t.Context(), owner.NodeKey("e1"), 0)
	if err != nil || !strings.Contains(string(obj.Body), `"released":true`) {
		t.Fatalf("node lease after exec: %s %v", obj.Body, err)
	}

	// The child's exit status is exec's, and nothing is printed for it.
	r = e.run(t, "exec", "job", "--node", "e1", "--ttl", "1s", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
	if r.status != 7 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Fatalf("exit %d stdout %q stderr %q, want 7, the child's output only", r.status, r.stdout, r.stderr)
	}
	if rec, _ := e.record(t, "job"); !rec.Released() || rec.Epoch != 2 {
		t.Fatalf("record after a failed command: %+v", rec)
	}
	// Killed by a signal: 128+N, as a shell reports it.
	r = e.run(t, "exec", "job", "--node", "e1", "--ttl", "1s", "--", "sh", "-c", "kill -TERM $$")
	wantExit(t, r, 143, "")

	// Without "--", when the command has no dashes of its own.
	r = e.run(t, "exec", "job", "--node", "e1", "--ttl", "1s", "true")
	wantExit(t, r, 0, "")

	// Usage errors are refused before anything is written.
	before := len(e.keys(t))
	wantExit(t, e.run(t, "exec", "job", "extra", "--", "true"), 2, errcode.CodeBadRequest)
	wantExit(t, e.run(t, "exec", "job"), 2, errcode.CodeBadRequest)
	wantExit(t, e.run(t, "exec", "--", "true"), 2, errcode.CodeBadRequest)
	wantExit(t, e.run(t, "exec", "job", "--node", "x1", "--", "no-such-command-deed"), 2, errcode.CodeBadRequest)
	wantExit(t, e.run(t, "exec", "job", "--node", "x1", "--ttl", "-1s", "--", "true"), 2, errcode.CodeBadRequest)
	if after := len(e.keys(t)); after != before {
		t.Fatalf("refused execs wrote %d objects", after-before)
	}
}

func TestExecHeld(t *testing.T) {
	e := newCellEnv(t)
	first := e.start(t, "exec", "job", "--node", "a", "--ttl", "1s", "--", "sh", "-c", "echo running; exec sleep 30")
	first.waitOut(t, "running", 10*time.Second)

	// Another node: held by a live node, exit 4 at once.
	start := time.Now()
	r := e.run(t, "exec", "job", "--node", "b", "--ttl", "1s", "--", "echo", "must not run")
	wantExit(t, r, 4, errcode.CodeHeld)
	if strings.Contains(r.stdout, "must not run") || !strings.Contains(r.stderr, "held by live node a") {
		t.Fatalf("second exec: %+v", r)
	}
	t.Logf("second exec refused in %v", time.Since(start))
	// --wait gives up after the wait, still exit 4.
	r = e.run(t, "exec", "job", "--node", "b", "--ttl", "1s", "--wait", "400ms", "--", "echo", "must not run")
	wantExit(t, r, 4, errcode.CodeHeld)
	// The same node id: its node lease is renewed by a live process.
	r = e.run(t, "exec", "job", "--node", "a", "--ttl", "1s", "--", "echo", "must not run")
	wantExit(t, r, 4, errcode.CodeHeld)
	if !strings.Contains(r.stderr, "node id a is in use by a live process") {
		t.Errorf("same node: %q", r.stderr)
	}
	// The refused execs released their own node leases and left a's alone.
	if rec, _ := e.record(t, "job"); rec.Node != "a" || rec.Epoch != 1 {
		t.Fatalf("record %+v", rec)
	}

	// A waiting exec runs once the first one ends. Interrupting the first
	// (as SIGTERM would) terminates its command: exit 128+15.
	waiter := e.start(t, "exec", "job", "--node", "b", "--ttl", "1s", "--wait", "20s", "--", "sh", "-c", `echo "got it at epoch $DEED_EPOCH"`)
	time.Sleep(200 * time.Millisecond)
	if res := first.stop(t); res.status != 143 {
		t.Fatalf("interrupted exec: exit %d, stderr %q", res.status, res.stderr)
	}
	res := waiter.wait(t, 10*time.Second)
	wantExit(t, res, 0, "")
	if res.stdout != "got it at epoch 2\n" {
		t.Fatalf("waiter stdout %q", res.stdout)
	}
}

func TestExecLeaseLost(t *testing.T) {
	e := newCellEnv(t)
	marker := filepath.Join(t.TempDir(), "term")
	// The shell's child (sleep) is in its process group too: it gets the
	// SIGTERM, so the trap runs at once.
	script := `trap 'echo TERM > "$MARKER"; exit 0' TERM; echo running; sleep 30 & wait`
	t.Setenv("MARKER", marker)
	ex := e.start(t, "exec", "job", "--node", "a", "--ttl", "1s", "--", "sh", "-c", script)
	ex.waitOut(t, "running", 10*time.Second)

	start := time.Now()
	wantExit(t, e.run(t, "claim", "job", "--node", "b", "--force"), 0, "")
	res := ex.wait(t, 10*time.Second)
	took := time.Since(start)
	wantExit(t, res, 3, errcode.CodeSuperseded)
	if !strings.Contains(res.stderr, "because the lease was lost") || !strings.Contains(res.stderr, "fenced by a claim at epoch 2") {
		t.Errorf("stderr %q", res.stderr)
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != "TERM\n" {
		t.Fatalf("the command did not get SIGTERM: %q %v", b, err)
	}
	if took > 3*time.Second {
		t.Errorf("exec noticed the lost lease after %v, want within about TTL/3", took)
	}
	t.Logf("lease loss to exit: %v", took)
	// b's fence stands.
	if rec, _ := e.record(t, "job"); !rec.Released() || rec.Epoch != 2 {
		t.Fatalf("record %+v", rec)
	}
}

func TestExecLeaseLostKillsAfterGrace(t *testing.T) {
	e := newCellEnv(t)
	// A command that ignores SIGTERM is killed after --grace.
	ex := e.start(t, "exec", "job", "--node", "a", "--ttl", "1s", "--grace", "300ms", "--",
		"sh", "-c", `trap '' TERM; echo running; while :; do sleep 0.05; done`)
	ex.waitOut(t, "running", 10*time.Second)
	wantExit(t, e.run(t, "release", "job", "--node", "ops", "--force"), 0, "")
	res := ex.wait(t, 10*time.Second)
	wantExit(t, res, 3, errcode.CodeSuperseded)
	if !strings.Contains(res.stderr, "exit status 137") || !strings.Contains(res.stderr, "released by someone else") {
		t.Errorf("stderr %q", res.stderr)
	}
}

// TestExecWaitsThroughNodeIDInUse: --wait covers a node id in use as well
// as a held cell; the second exec under the same explicit --node runs once
// the first one ends.
func TestExecWaitsThroughNodeIDInUse(t *testing.T) {
	e := newCellEnv(t)
	first := e.start(t, "exec", "job1", "--node", "a", "--ttl", "1s", "--", "sh", "-c", "echo running; exec sleep 30")
	first.waitOut(t, "running", 10*time.Second)
	second := e.start(t, "exec", "job2", "--node", "a", "--ttl", "1s", "--wait", "30s", "--", "echo", "second ran")
	time.Sleep(1500 * time.Millisecond) // past one watch of the node lease: "in use"
	if res := first.stop(t); res.status != 143 {
		t.Fatalf("first exec: exit %d, stderr %q", res.status, res.stderr)
	}
	res := second.wait(t, 20*time.Second)
	wantExit(t, res, 0, "")
	if res.stdout != "second ran\n" {
		t.Fatalf("second exec stdout %q", res.stdout)
	}
}

// TestExecDefaultIdentity: without --node, an exec runs under a fresh
// <host>-exec-<random> id, not DEED_NODE and not the hostname.
func TestExecDefaultIdentity(t *testing.T) {
	e := newCellEnv(t)
	e.env[envNode] = "daemon-1"
	host, _ := os.Hostname()
	ids := map[string]bool{}
	for range 2 {
		r := e.run(t, "exec", "job", "--ttl", "1s", "--", "sh", "-c", `echo "$DEED_NODE"`)
		wantExit(t, r, 0, "")
		id := strings.TrimSpace(r.stdout)
		if !strings.HasPrefix(id, host+"-exec-") || len(id) != len(host)+len("-exec-")+8 || owner.ValidateName("node", id) != nil {
			t.Fatalf("exec ran as %q, want %s-exec-<8 hex>", id, host)
		}
		ids[id] = true
	}
	if len(ids) != 2 {
		t.Fatalf("two execs shared an id: %v", ids)
	}
	// Their node leases are gone, not left to pile up under nodes/.
	for _, k := range e.keys(t) {
		if strings.Contains(k, "/nodes/") {
			t.Errorf("exec left %s", k)
		}
	}
}
