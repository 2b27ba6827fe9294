//go:build linux

package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deedkit/deed/errcode"
)

// Process-level tests of identities and of exec's guarantees: the real
// binary as separate processes against `deed fakes3` (newE2ECluster).

// TestE2EExecDifferentCellsOneHost: two execs of different cells on one
// host, neither given --node, run at the same time: each has an identity
// of its own, so neither finds its node id in use.
func TestE2EExecDifferentCellsOneHost(t *testing.T) {
	c := newE2ECluster(t)
	dir := t.TempDir()
	// Each command marks that it runs, then waits for the other's mark:
	// it succeeds only if both run at once.
	script := `touch "$DIR/$DEED_CELL"; i=0; while [ $i -lt 200 ]; do [ -e "$DIR/$OTHER" ] && exit 0; sleep 0.05; i=$((i+1)); done; exit 9`
	a := startDeed(t, append(c.env, "DIR="+dir, "OTHER=cell-b"), "exec", "cell-a", "--ttl", "2s", "--", "sh", "-c", script)
	b := startDeed(t, append(c.env, "DIR="+dir, "OTHER=cell-a"), "exec", "cell-b", "--ttl", "2s", "--", "sh", "-c", script)
	if st := a.wait(t, 30*time.Second); st != 0 {
		t.Fatalf("exec cell-a: exit %d\n%s", st, a.out)
	}
	if st := b.wait(t, 30*time.Second); st != 0 {
		t.Fatalf("exec cell-b: exit %d\n%s", st, b.out)
	}
}

// TestE2EClaimOnDaemonHostDoesNotFence: a daemon runs under the hostname
// (no --node); `deed claim`, `deed release` and `deed claim --node HOST`
// on its host do not act as it, and it keeps appending.
func TestE2EClaimOnDaemonHostDoesNotFence(t *testing.T) {
	c := newE2ECluster(t)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	api := waitNode(t, startDeed(t, c.env, "run", "--listen", anyPort, "--ttl", "2s"), host)
	if st, body := post(t, api+"/v1/cells/inv/append", "one"); st != 200 {
		t.Fatalf("append: %d %s", st, body)
	}

	st, out := c.cli(t, "claim", "inv")
	if st != 4 || !strings.Contains(out, string(errcode.CodeHeld)+" ") || !strings.Contains(out, "held by live node "+host) {
		t.Errorf("deed claim inv on the daemon's host: exit %d %q, want 4: held by %s", st, out, host)
	}
	st, out = c.cli(t, "claim", "inv", "--node", host)
	if st != 4 || !strings.Contains(out, "node id "+host+" is in use by a live process") {
		t.Errorf("deed claim inv --node %s: exit %d %q, want 4: node id in use", host, st, out)
	}
	st, out = c.cli(t, "release", "inv")
	if st != 4 || !strings.Contains(out, string(errcode.CodeNotHolder)+" ") {
		t.Errorf("deed release inv: exit %d %q, want 4 (not the holder)", st, out)
	}
	if st, body := post(t, api+"/v1/cells/inv/append", "two"); st != 200 {
		t.Fatalf("the daemon was fenced: append after the CLI commands: %d %s", st, body)
	}
	// Taking it from the live daemon is asked for by --force.
	if st, out := c.cli(t, "claim", "inv", "--force"); st != 0 || !strings.Contains(out, "fenced cell inv at epoch 2 (no holder") {
		t.Fatalf("deed claim inv --force: exit %d %q", st, out)
	}
	if st, body := post(t, api+"/v1/cells/inv/append", "three"); st != 409 || !strings.Contains(body, string(errcode.CodeSuperseded)) {
		t.Fatalf("append after the fence: %d %s, want 409 %s", st, body, errcode.CodeSuperseded)
	}
}

// heartbeatScript runs a loop in a grandchild of exec (a subshell in the
// background: only the shell is exec's child) that appends the time in ns
// to $HB every 20ms, and writes the loop's pid to $PIDFILE.
const heartbeatScript = `( while :; do date +%s%N >> "$HB"; sleep 0.02; done ) & echo $! > "$PIDFILE"; wait`

// lastNumber is the last complete number in file (0 when there is none).
func lastNumber(t *testing.T, file string) int64 {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if n, err := strconv.ParseInt(strings.TrimSpace(lines[i]), 10, 64); err == nil {
			return n
		}
	}
	return 0
}

// waitPID waits for file to hold a pid and returns it.
func waitPID(t *testing.T, file string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if raw, err := os.ReadFile(file); err == nil && bytes.HasSuffix(raw, []byte("\n")) {
			pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no pid in %s", file)
	return 0
}

// processAlive reports whether pid runs (a zombie, dead but not yet reaped
// by whoever inherited it, counts as dead).
func processAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) STATE ...: comm may hold spaces, so look after the ')'.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// killLeftover kills pid at the end of a test, for the old behaviour that
// left it running.
func killLeftover(t *testing.T, pid int) {
	t.Cleanup(func() {
		if processAlive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// heartbeatExec starts an exec of cell job (TTL 2s) running
// heartbeatScript in dir, and waits for the first heartbeat. It returns the
// exec, the heartbeat file and the loop's pid (killed at the end of the test
// if it still runs).
func heartbeatExec(t *testing.T, c *e2eCluster, dir string) (*proc, string, int) {
	t.Helper()
	hb, pidfile := filepath.Join(dir, "hb"), filepath.Join(dir, "pid")
	first := startDeed(t, append(c.env, "HB="+hb, "PIDFILE="+pidfile), "exec", "job", "--ttl", "2s", "--", "sh", "-c", heartbeatScript)
	loop := waitPID(t, pidfile)
	killLeftover(t, loop)
	for lastNumber(t, hb) == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	return first, hb, loop
}

// secondExec runs an exec of cell job that waits for it and writes the
// time it started to the returned file.
func secondExec(t *testing.T, c *e2eCluster, dir string) (*proc, string) {
	t.Helper()
	started := filepath.Join(dir, "second-started")
	p := startDeed(t, append(c.env, "STARTED="+started), "exec", "job", "--ttl", "2s", "--wait", "60s",
		"--", "sh", "-c", `date +%s%N > "$STARTED"`)
	return p, started
}

// TestE2EExecKill9KillsTheGroup: kill -9 of deed exec kills its command's
// whole process group, grandchildren included, before another exec may
// take the lock.
func TestE2EExecKill9KillsTheGroup(t *testing.T) {
	c := newE2ECluster(t)
	dir := t.TempDir()
	first, hb, loop := heartbeatExec(t, c, dir)

	killed := time.Now()
	// Not waited for: its output pipe stays open as long as anything of
	// its command's group does.
	first.signal(t, syscall.SIGKILL)
	second, started := secondExec(t, c, dir)
	for processAlive(loop) && time.Since(killed) < 10*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if processAlive(loop) {
		t.Errorf("the command's grandchild %d still runs %v after kill -9 of deed exec", loop, time.Since(killed))
	} else {
		t.Logf("grandchild dead %v after kill -9", time.Since(killed))
	}
	if st := second.wait(t, 60*time.Second); st != 0 {
		t.Fatalf("second exec: exit %d\n%s", st, second.out)
	}
	start, last := lastNumber(t, started), lastNumber(t, hb)
	t.Logf("second exec started %v after kill -9; overlap %v", time.Duration(start-killed.UnixNano()), time.Duration(max(0, last-start)))
	if last >= start {
		t.Fatalf("two exclusive runs: the first command's group ran until %v after the second started", time.Duration(last-start))
	}
}

// TestE2EExecStoppedSupervisorNoOverlap: deed exec stopped (SIGSTOP) for
// longer than its TTL can neither renew nor signal; its guard kills the
// command's group by the fence deadline, so a second exec that takes the
// lock never runs alongside it.
func TestE2EExecStoppedSupervisorNoOverlap(t *testing.T) {
	c := newE2ECluster(t)
	dir := t.TempDir()
	first, hb, loop := heartbeatExec(t, c, dir)

	first.signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	t.Cleanup(func() { _ = first.cmd.Process.Signal(syscall.SIGCONT) })
	second, started := secondExec(t, c, dir)
	if st := second.wait(t, 60*time.Second); st != 0 {
		t.Fatalf("second exec: exit %d\n%s", st, second.out)
	}
	if processAlive(loop) {
		t.Errorf("the stopped exec's grandchild %d still runs after the second exec ran", loop)
	}
	if d := time.Until(stopped.Add(6 * time.Second)); d > 0 {
		time.Sleep(d)
	}
	first.signal(t, syscall.SIGCONT)
	st := first.wait(t, 30*time.Second)

	start, last := lastNumber(t, started), lastNumber(t, hb)
	overlap := time.Duration(max(0, last-start))
	t.Logf("second exec started %v after the SIGSTOP; the first command's last heartbeat %v after the SIGSTOP; overlap %v; first exec exit %d",
		time.Duration(start-stopped.UnixNano()), time.Duration(last-stopped.UnixNano()), overlap, st)
	if last >= start {
		t.Fatalf("two exclusive runs overlapped by %v", overlap)
	}
	if st != 3 || !strings.Contains(first.out.String(), string(errcode.CodeNodeFenced)) {
		t.Errorf("stopped exec: exit %d, want 3 with %s\n%s", st, errcode.CodeNodeFenced, first.out)
	}
	if !strings.Contains(first.out.String(), "deed exec guard: the fence deadline passed") {
		t.Errorf("the guard did not say it killed the group:\n%s", first.out)
	}
}

// childWithEnv finds the child of parent whose environment holds kv.
func childWithEnv(t *testing.T, parent int, kv string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			stat, err := os.ReadFile(d + "/stat")
			if err != nil {
				continue
			}
			i := bytes.LastIndexByte(stat, ')')
			f := strings.Fields(string(stat[i+1:]))
			if len(f) < 2 || f[1] != strconv.Itoa(parent) {
				continue
			}
			env, _ := os.ReadFile(d + "/environ")
			if bytes.Contains(env, []byte("\x00"+kv+"\x00")) {
				pid, _ := strconv.Atoi(filepath.Base(d))
				return pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no child of %d with %s", parent, kv)
	return 0
}

// TestE2EExecGuardDeathKillsTheCommand: if the guard dies, exec kills its
// command (nothing would stop it in time were exec paused) and exits 3.
func TestE2EExecGuardDeathKillsTheCommand(t *testing.T) {
	c := newE2ECluster(t)
	first, _, loop := heartbeatExec(t, c, t.TempDir())
	g := childWithEnv(t, first.cmd.Process.Pid, envGuard+"=1")
	if err := syscall.Kill(g, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if st := first.wait(t, 20*time.Second); st != 3 || !strings.Contains(first.out.String(), "the exec guard process exited") {
		t.Fatalf("exec after its guard died: exit %d\n%s", st, first.out)
	}
	if processAlive(loop) {
		t.Fatalf("the command's grandchild %d still runs", loop)
	}
}

// TestE2EExecKillsLeftoversBeforeRelease: what is left of the command's
// process group when the command exits (a background job) is killed
// before the cell is released: the lock covers the group.
func TestE2EExecKillsLeftoversBeforeRelease(t *testing.T) {
	c := newE2ECluster(t)
	pidfile := filepath.Join(t.TempDir(), "pid")
	st, out := c.cli(t, "exec", "job", "--", "sh", "-c", `sleep 60 >/dev/null 2>&1 & echo $! > "`+pidfile+`"`)
	if st != 0 {
		t.Fatalf("exec: exit %d %s", st, out)
	}
	pid := waitPID(t, pidfile)
	killLeftover(t, pid)
	if processAlive(pid) {
		t.Fatalf("the command's background job %d outlived the exec and its release", pid)
	}
}
