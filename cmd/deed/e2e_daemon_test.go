package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deedkit/deed/daemon"
	"github.com/deedkit/deed/daemon/daemontest"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

// The end-to-end tests run the real binary as separate processes: a
// `deed fakes3` store and `deed run` daemons on loopback.

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// longE2E skips a test of a fleet of real processes that runs for most of
// a minute unless DEED_E2E_LONG is set: make test stays within its budget,
// and make test-long (which CI runs) runs them.
func longE2E(t *testing.T) {
	t.Helper()
	if os.Getenv("DEED_E2E_LONG") == "" {
		t.Skip("a long run of a fleet of real processes: set DEED_E2E_LONG=1 (make test-long, which CI runs)")
	}
}

// deedBinary builds cmd/deed once per test run.
func deedBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end: builds and runs the binary; skipped with -short")
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "deed-e2e-bin")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "deed")
		out, err := exec.Command("go", "build", "-race", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// anyPort is the --listen (and --s3-listen) of every process the tests
// start: the child binds a free port itself and names it in its output
// (banner, log), where the test reads it. A port the test picked and
// released could be taken by another process before the child binds it,
// and the test would then talk to that process.
const anyPort = "127.0.0.1:0"

// What the children print once they serve, each with the URL they serve
// as the first group: `deed fakes3`'s banner; `deed run`'s log line when
// its API listens (before the store is probed), its banner once the node
// is ready, and the banner's line for its embedded store.
var (
	fakeS3Banner    = regexp.MustCompile(`(?m)^deed fakes3: serving (http://[^ ]+) `)
	apiListening    = regexp.MustCompile(`msg="API listening; [^"]*" addr=(https?://\S+)`)
	runBanner       = regexp.MustCompile(`(?m)^deed node [^ ]+ serving (https?://[^ \n]+)$`)
	embeddedBanner  = regexp.MustCompile(`(?m)^store: embedded store [^ ]+ at (http://[^ ]+) `)
	bannerWaitLimit = 60 * time.Second
)

// reported waits until p's output matches re and returns the first group.
// It fails at once when p exits first: a child that could not start is not
// waited on for the whole limit, and whatever else answers on a port is
// never taken for it.
func reported(t *testing.T, p *proc, re *regexp.Regexp, limit time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if m := re.FindStringSubmatch(p.out.String()); m != nil {
			return m[1]
		}
		select {
		case <-p.done:
			if m := re.FindStringSubmatch(p.out.String()); m != nil {
				return m[1]
			}
			t.Fatalf("the process exited (%v) before printing %s:\n%s", p.cmd.ProcessState, re, p.out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v:\n%s", re, limit, p.out.String())
		}
	}
}

// waitNode waits until `deed run` p, node, is ready: its banner names the
// API's URL, and /readyz there answers 200 from that node (Deed-Node).
// It returns the URL.
func waitNode(t *testing.T, p *proc, node string) string {
	t.Helper()
	base := reported(t, p, runBanner, bannerWaitLimit)
	waitHTTP(t, p, base+"/readyz", node, 30*time.Second)
	return base
}

// proc is a running deed process whose output is kept for failure reports.
type proc struct {
	cmd  *exec.Cmd
	out  *daemontest.SyncBuffer
	done chan struct{}
}

func startDeed(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startDeedBin(t, deedBinary(t), env, args...)
}

// startDeedBin is startDeed with the binary at bin (another build, or
// another version's, as the fault run compares).
func startDeedBin(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	return startCmd(t, cmd, "deed "+strings.Join(args, " "))
}

// startCmd starts cmd with its output kept for failure reports (under
// name), and kills it at the end of the test.
func startCmd(t *testing.T, cmd *exec.Cmd, name string) *proc {
	t.Helper()
	out := &daemontest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, out: out, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	return p
}

func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("process did not exit within %v", d)
		return -1
	}
}

// waitHTTP polls url, served by p, until it answers 200 from node (its
// Deed-Node header: not another server on the port). It fails at once
// when p has exited.
func waitHTTP(t *testing.T, p *proc, url, node string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	last := ""
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("the process serving %s exited (%v):\n%s", url, p.cmd.ProcessState, p.out.String())
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			got := resp.Header.Get(daemon.HeaderNode)
			if resp.StatusCode == 200 && got == node {
				return
			}
			last = fmt.Sprintf("%d from node %q", resp.StatusCode, got)
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s not ready (200 from node %q) within %v; last: %s", url, node, limit, last)
}

// e2eCluster is one `deed fakes3` store and the environment to use it.
type e2eCluster struct {
	store *proc
	creds fakes3.Credentials
	env   []string
}

func newE2ECluster(t *testing.T) *e2eCluster {
	t.Helper()
	return newE2EClusterBin(t, deedBinary(t))
}

// newE2EClusterBin is newE2ECluster with the store served by the binary
// at bin.
func newE2EClusterBin(t *testing.T, bin string) *e2eCluster {
	t.Helper()
	dir := t.TempDir()
	p := startDeedBin(t, bin, nil, "fakes3", "--listen", anyPort, "--bucket", "e2e", "--dir", dir)
	s3 := waitS3(t, p)
	// The store checks signatures against the credentials it generated in
	// its directory before it started listening.
	creds, err := fakes3.LoadCredentials(filepath.Join(dir, fakes3.CredentialsFile))
	if err != nil {
		t.Fatal(err)
	}
	return &e2eCluster{store: p, creds: creds, env: []string{
		"DEED_BUCKET=s3://e2e/test", "DEED_ENDPOINT=http://" + s3,
		"AWS_ACCESS_KEY_ID=" + creds.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + creds.SecretAccessKey, "AWS_REGION=us-east-1",
	}}
}

// waitS3 waits for `deed fakes3` p to serve and returns its address
// (host:port), read from its banner, which it prints once it listens.
func waitS3(t *testing.T, p *proc) string {
	t.Helper()
	return strings.TrimPrefix(reported(t, p, fakeS3Banner, bannerWaitLimit), "http://")
}

// daemon starts `deed run` as node and returns its API base URL.
func (c *e2eCluster) daemon(t *testing.T, node string, extra ...string) (*proc, string) {
	t.Helper()
	args := append([]string{"run", "--node", node, "--listen", anyPort, "--ttl", "2s"}, extra...)
	p := startDeed(t, c.env, args...)
	return p, waitNode(t, p, node)
}

// cli runs a one-shot deed command against the cluster's store.
func (c *e2eCluster) cli(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, deedBinary(t), args...)
	cmd.Env = append(os.Environ(), c.env...)
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/octet-stream", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestE2EForcedClaimFencesDaemon(t *testing.T) { e2eForcedClaim(t, newE2ECluster(t)) }

func e2eForcedClaim(t *testing.T, c *e2eCluster) {
	_, a := c.daemon(t, "node-a")
	var acked []string
	for i := range 20 {
		data := fmt.Sprintf("rec-%02d", i)
		if st, body := post(t, a+"/v1/cells/orders/append", data); st != 200 {
			t.Fatalf("append: %d %s", st, body)
		}
		acked = append(acked, data)
	}
	// An operator forces the cell to another node from the CLI.
	if st, out := c.cli(t, "claim", "orders", "--force", "--node", "node-b"); st != 0 {
		t.Fatalf("deed claim --force: exit %d: %s", st, out)
	}
	st, body := post(t, a+"/v1/cells/orders/append", "after-fence")
	if st != 409 || !strings.Contains(body, string(errcode.CodeSuperseded)) {
		t.Fatalf("append after forced claim: %d %s, want 409 %s", st, body, errcode.CodeSuperseded)
	}
	// Every acknowledged record is still read back; the refused one is not.
	st, body = get(t, a+"/v1/cells/orders/records?limit=1000")
	if st != 200 {
		t.Fatal(body)
	}
	for _, d := range acked {
		if !strings.Contains(body, b64(d)) {
			t.Fatalf("acknowledged %q lost: %s", d, body)
		}
	}
	if strings.Contains(body, b64("after-fence")) {
		t.Fatal("refused append is visible")
	}
}

func TestE2EKill9TakeoverWithinTTL(t *testing.T) { e2eKill9Takeover(t, newE2ECluster(t)) }

func e2eKill9Takeover(t *testing.T, c *e2eCluster) {
	pa, a := c.daemon(t, "node-a")
	_, b := c.daemon(t, "node-b")
	for _, cell := range []string{"c1", "c2", "c3"} {
		if st, body := post(t, a+"/v1/cells/"+cell+"/append", "x"); st != 200 {
			t.Fatal(body)
		}
	}
	if st, body := post(t, b+"/v1/cells/c1/claim", ""); st != 409 || !strings.Contains(body, string(errcode.CodeHeld)) {
		t.Fatalf("claim of a live node's cell: %d %s", st, body)
	}
	pa.signal(t, syscall.SIGKILL)
	start := time.Now()
	for _, cell := range []string{"c1", "c2", "c3"} {
		for {
			st, body := post(t, b+"/v1/cells/"+cell+"/claim", "")
			if st == 200 {
				break
			}
			if !strings.Contains(body, string(errcode.CodeHeld)) {
				t.Fatalf("claim %s: %d %s", cell, st, body)
			}
			if time.Since(start) > 2*time.Second+2*time.Second {
				t.Fatalf("%s not claimable %v after kill -9 (TTL 2s)", cell, time.Since(start))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("took over 3 cells %v after kill -9", time.Since(start))
	st, body := get(t, b+"/v1/cells/c2/records?barrier=true")
	if st != 200 || !strings.Contains(body, b64("x")) {
		t.Fatalf("records after takeover: %d %s", st, body)
	}
}

func TestE2ESigtermDrains(t *testing.T) { e2eSigtermDrains(t, newE2ECluster(t)) }

func e2eSigtermDrains(t *testing.T, c *e2eCluster) {
	pa, a := c.daemon(t, "node-a")
	_, b := c.daemon(t, "node-b")
	for i := range 5 {
		if st, body := post(t, fmt.Sprintf("%s/v1/cells/d%d/append", a, i), "x"); st != 200 {
			t.Fatal(body)
		}
	}
	pa.signal(t, syscall.SIGTERM)
	if code := pa.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("drain exited %d", code)
	}
	for i := range 5 {
		st, body := post(t, fmt.Sprintf("%s/v1/cells/d%d/claim", b, i), "")
		if st != 200 {
			t.Fatalf("claim right after drain: %d %s", st, body)
		}
	}
	// The node lease says released: nodes shows it dead at once.
	st, out := c.cli(t, "show", "d0", "--json")
	if st != 0 || !strings.Contains(out, `"node":"node-b"`) {
		t.Fatalf("show: %d %s", st, out)
	}
}

func TestE2EBadCellNameWritesNothing(t *testing.T) {
	c := newE2ECluster(t)
	for _, args := range [][]string{{"claim", "bad/name"}, {"release", ".."}, {"show", "a b"}} {
		st, out := c.cli(t, args...)
		if st != 2 || !strings.HasPrefix(strings.TrimSpace(out), string(errcode.CodeInvalidName)) {
			t.Fatalf("deed %v: exit %d %q, want exit 2 with %s", args, st, out, errcode.CodeInvalidName)
		}
	}
	st, out := c.cli(t, "ls", "--json")
	if st != 0 || strings.Contains(out, "bad") {
		t.Fatalf("ls after bad names: %d %s", st, out)
	}
}

func b64(s string) string {
	return base64.StdEncoding.EncodeToString([]byte(s))
}

// With --fence-exit, a daemon that cannot renew its node lease exits with
// status 3 (DEED-E025) instead of lingering, for supervisors to restart.
func TestE2EFenceExit(t *testing.T) {
	c := newE2ECluster(t)
	pa, a := c.daemon(t, "node-a", "--fence-exit")
	if st, body := post(t, a+"/v1/cells/f/append", "x"); st != 200 {
		t.Fatal(body)
	}
	c.store.signal(t, syscall.SIGKILL) // the store goes away: no renewal can succeed
	start := time.Now()
	if code := pa.wait(t, 20*time.Second); code != 3 {
		t.Fatalf("fenced daemon exited %d, want 3", code)
	}
	// Fence at TTL−margin after the last good renewal, then exit at once:
	// the dropped logs are abandoned, not sealed against a dead store.
	t.Logf("exited %v after the store died (TTL 2s)", time.Since(start))
	// Bound: TTL plus slack for a loaded machine, still well under the
	// TTL+TTL (3.8 s measured) it took while it sealed against a dead store.
	if took := time.Since(start); took > 2*time.Second+1500*time.Millisecond {
		t.Fatalf("exited %v after the store died; want within about TTL (2s)", took)
	}
	if !strings.Contains(pa.out.String(), string(errcode.CodeNodeFenced)) {
		t.Fatalf("exit message lacks %s:\n%s", errcode.CodeNodeFenced, pa.out.String())
	}
}
