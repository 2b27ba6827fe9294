package browsertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// The fleet: three `deed run` daemons on one `deed fakes3` store, each with
// its own node id, seeing each other through their node leases.
var nodes = []string{"node-1", "node-2", "node-3"}

// execs is how many `deed exec` runs the fleet sees before the page loads.
const execs = 20

// cellsOf are the cells each node appends to, so it holds them.
var cellsOf = map[string][]string{
	"node-1": {"alpha", "beta"},
	"node-2": {"gamma"},
	"node-3": {"delta"},
}

// TestStatusPageInBrowser loads node-1's status page in headless Chromium
// and checks that it shows the three nodes and node-1's cells (including
// one it took over from node-2 by force, which is on the page as a
// takeover), and that the browser saw no console error, no exception, no
// failed request and no answer of 400 or more.
func TestStatusPageInBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	deed := deedBinary(t)

	// Every process listens on port 0 and reports the port it got (a port
	// picked here and released could be taken by another process first).
	dir := t.TempDir()
	store := reported(t, start(t, deed, nil, "fakes3", "--listen", "127.0.0.1:0", "--bucket", "browser", "--dir", dir), fakeS3Banner)
	env := append(storeCredentials(t, filepath.Join(dir, "credentials.env")),
		"DEED_BUCKET=s3://browser/fleet", "DEED_ENDPOINT="+store, "AWS_REGION=us-east-1")

	procs := map[string]*proc{}
	for _, n := range nodes {
		procs[n] = start(t, deed, env, "run", "--node", n, "--listen", "127.0.0.1:0", "--ttl", "3s")
	}
	urls := map[string]string{}
	for _, n := range nodes {
		urls[n] = reported(t, procs[n], runBanner)
		waitReady(t, urls[n], n)
	}
	for _, n := range nodes {
		for _, c := range cellsOf[n] {
			post(t, urls[n]+"/v1/cells/"+c+"/append", "hello from "+n)
		}
	}
	// node-1 takes gamma from node-2: a takeover on node-1's page.
	post(t, urls["node-1"]+"/v1/cells/gamma/claim?force=true", "")
	// 20 deed execs come and go, each under an id of its own whose node
	// lease it deletes when it ends: the page must neither show them as
	// failures nor keep them for ever.
	for i := range execs {
		cmd := exec.Command(deed, "exec", fmt.Sprintf("job-%d", i), "--", "true")
		cmd.Env = append(append([]string{}, env...), "PATH="+os.Getenv("PATH"), "HOME="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("deed exec %d: %v\n%s", i, err, out)
		}
	}
	// A worker that held a cell under an id of its own and stopped cleanly
	// leaves its lease released in the bucket: grey on the page, not red.
	hold := exec.Command(deed, "claim", "held", "--node", "worker-1", "--hold", "--ttl", "3s")
	hold.Env = append(append([]string{}, env...), "PATH="+os.Getenv("PATH"), "HOME="+t.TempDir())
	var holdOut syncBuffer
	hold.Stdout, hold.Stderr = &holdOut, &holdOut
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() string {
		if !strings.Contains(holdOut.String(), "holding cell held") {
			return "claim --hold has not taken the cell yet: " + holdOut.String()
		}
		return ""
	})
	if err := hold.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := hold.Wait(); err != nil {
		t.Fatalf("claim --hold after Ctrl-C: %v\n%s", err, holdOut.String())
	}
	want := append(append([]string{}, cellsOf["node-1"]...), "gamma")
	// The cell counts are the ones the nodes' leases advertised at their
	// last renewal (node-2 learns of the takeover only at its next write
	// to gamma, so its count is left out).
	counts := map[string]int{"node-1": len(want), "node-3": len(cellsOf["node-3"])}
	waitFleetSeen(t, urls["node-1"], counts)

	var seen problems
	alloc, cancel := chromedp.NewExecAllocator(t.Context(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()))...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	// The first Do starts the browser and opens the tab, so that the
	// listener is there before the page loads.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", chrome, err)
	}
	if err := chromedp.Listen(ctx, seen.record); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(urls["node-1"]+"/"), chromedp.WaitVisible(chromedp.ID("nodes"))); err != nil {
		t.Fatalf("load the status page: %v", err)
	}
	text := func(id string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id)))
		if err != nil {
			t.Fatalf("text of #%s: %v", id, err)
		}
		return s
	}
	title, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil || !strings.Contains(title, "node-1") {
		t.Errorf("title %q (%v), want it to name node-1", title, err)
	}
	nodeTable := text("nodes")
	for _, n := range nodes {
		if !strings.Contains(nodeTable, n) || !strings.Contains(nodeTable, urls[n]) {
			t.Errorf("the nodes table lacks %s at %s:\n%s", n, urls[n], nodeTable)
		}
	}
	if strings.Count(nodeTable, "alive") != len(nodes) {
		t.Errorf("the nodes table does not show %d nodes alive:\n%s", len(nodes), nodeTable)
	}
	if !strings.Contains(nodeTable, "worker-1") || !strings.Contains(nodeTable, "released") {
		t.Errorf("the nodes table lacks the released worker-1:\n%s", nodeTable)
	}
	// The execs' leases are gone and worker-1's released: clean ends, not
	// coloured as failures.
	if bad, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#nodes td.bad").length`)); err != nil || bad != 0 {
		t.Errorf("%d node states coloured as failures (%v) after %d clean execs:\n%s", bad, err, execs, nodeTable)
	}
	if head := text("events"); !strings.Contains(head, "other node") {
		t.Errorf("the events table does not label its node column:\n%s", head)
	}
	for n, c := range counts {
		row := strings.Fields(text("node-" + n))
		if len(row) == 0 || row[len(row)-1] != fmt.Sprint(c) {
			t.Errorf("the row of %s is %q, want %d cells held last", n, row, c)
		}
	}
	cellTable := text("cells")
	for _, c := range want {
		if !strings.Contains(cellTable, c) {
			t.Errorf("the cells table lacks %s:\n%s", c, cellTable)
		}
	}
	if strings.Contains(cellTable, "delta") {
		t.Errorf("the cells table of node-1 lists node-3's cell delta:\n%s", cellTable)
	}
	if events := text("events"); !strings.Contains(events, "takeover") || !strings.Contains(events, "gamma") {
		t.Errorf("the events table lacks the takeover of gamma:\n%s", events)
	}
	// A link of the nodes table leads to that node's own page.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#nodes a[href="`+urls["node-3"]+`"]`))); err != nil {
		t.Fatalf("follow the link to node-3: %v", err)
	}
	eventually(t, 10*time.Second, func() string {
		got, err := chromedp.Run(ctx, chromedp.Title())
		if err != nil || !strings.Contains(got, "node-3") {
			return fmt.Sprintf("the link to node-3 led to the page %q (%v)", got, err)
		}
		return ""
	})
	if out := os.Getenv("DEED_BROWSER_SCREENSHOT"); out != "" {
		if err := chromedp.Do(ctx, chromedp.Navigate(urls["node-1"]+"/"), chromedp.WaitVisible(chromedp.ID("nodes"))); err != nil {
			t.Fatal(err)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: a PNG
		if err == nil {
			err = os.WriteFile(out, png, 0o644)
		}
		if err != nil {
			t.Errorf("screenshot: %v", err)
		}
	}
	// The execs' leases are forgotten TTL+margin after they went: the
	// page is back to the three nodes.
	eventually(t, 30*time.Second, func() string {
		if err := chromedp.Do(ctx, chromedp.Navigate(urls["node-1"]+"/"), chromedp.WaitVisible(chromedp.ID("nodes"))); err != nil {
			return fmt.Sprintf("reload: %v", err)
		}
		rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#nodes tbody tr").length`))
		if err != nil || rows != len(nodes)+1 {
			return fmt.Sprintf("the nodes table has %d rows (%v), want %d (and worker-1's released lease) once the execs are forgotten", rows, err, len(nodes))
		}
		return ""
	})
	// Events arrive before the answer of the command that caused them, so
	// every message of the loads above is in by now.
	for _, p := range seen.list() {
		t.Errorf("browser: %s", p)
	}
}

// problems are what the browser reported that a clean page never causes.
type problems struct {
	mu   sync.Mutex
	errs []string
}

// record runs on the tab's event loop: it must be quick and call nothing.
func (p *problems) record(ev any) {
	var msg string
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range e.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			msg = fmt.Sprintf("console.%s: %s", e.Type, strings.Join(args, " "))
		}
	case *runtime.EventExceptionThrown:
		msg = "exception: " + e.ExceptionDetails.Text
		if e.ExceptionDetails.Exception != nil {
			msg += " " + e.ExceptionDetails.Exception.Description
		}
	case *log.EventEntryAdded:
		if e.Entry.Level == log.EntryLevelError {
			msg = fmt.Sprintf("log (%s): %s %s", e.Entry.Source, e.Entry.Text, e.Entry.URL)
		}
	case *network.EventLoadingFailed:
		msg = fmt.Sprintf("request failed: %s %s (blocked: %q)", e.Type, e.ErrorText, e.BlockedReason)
	case *network.EventResponseReceived:
		if e.Response.Status >= 400 {
			msg = fmt.Sprintf("answer %d for %s", e.Response.Status, e.Response.URL)
		}
	}
	if msg == "" {
		return
	}
	p.mu.Lock()
	p.errs = append(p.errs, msg)
	p.mu.Unlock()
}

func (p *problems) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.errs...)
}

// chromiumPath finds Debian's chromium (which `make test-browser`
// installs). Without it the test fails when a browser is required
// (DEED_REQUIRE_BROWSER=1, which `make test-browser` sets, or CI=true) and
// is skipped otherwise: a `go test` by hand on a machine without one.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("DEED_REQUIRE_BROWSER") == "1" || os.Getenv("CI") == "true" {
		t.Fatal("no chromium on PATH, and the browser test is required (DEED_REQUIRE_BROWSER=1 or CI=true): apt-get install chromium")
	}
	t.Skip("no chromium on PATH: `make test-browser` installs Debian's chromium, or apt-get install chromium")
	return ""
}

// deedBinary is $DEED_BIN (make test-browser builds it), else a fresh
// build of ../cmd/deed.
func deedBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DEED_BIN"); p != "" {
		return p
	}
	out := filepath.Join(t.TempDir(), "deed")
	cmd := exec.Command("go", "-C", "..", "build", "-o", out, "./cmd/deed")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/deed: %v\n%s", err, b)
	}
	return out
}

// start runs deed with args, and kills it (by its PID) when the test ends,
// logging its output if the test failed.
// proc is a started deed process and its output.
type proc struct {
	out  *syncBuffer
	done chan struct{} // closed when it has exited
}

func start(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	p := &proc{out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("deed %s:\n%s", strings.Join(args, " "), p.out.String())
		}
	})
	return p
}

// The banners of `deed fakes3` and `deed run`, the URL served the first
// group: each printed once the process serves (a node: once it is ready).
var (
	fakeS3Banner = regexp.MustCompile(`(?m)^deed fakes3: serving (http://[^ ]+) `)
	runBanner    = regexp.MustCompile(`(?m)^deed node [^ ]+ serving (http://[^ \n]+)$`)
)

// reported waits for p's banner and returns the URL in it; it fails at
// once when p exits first.
func reported(t *testing.T, p *proc, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := re.FindStringSubmatch(p.out.String()); m != nil {
			return m[1]
		}
		select {
		case <-p.done:
			t.Fatalf("the process exited before printing %s:\n%s", re, p.out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute:\n%s", re, p.out.String())
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// storeCredentials reads the environment lines (export K=V) of the
// credentials file `deed fakes3 --dir` writes before it listens.
func storeCredentials(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var env []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if kv, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export "); ok {
			env = append(env, kv)
		}
	}
	if len(env) == 0 {
		t.Fatalf("no credentials in %s", path)
	}
	return env
}

// eventually calls f every 100ms until it returns "" or limit passes, and
// fails the test with f's last complaint.
func eventually(t *testing.T, limit time.Duration, f func() string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", limit, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func get(url string) (int, []byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// waitReady waits until base/readyz answers 200 from node (its Deed-Node
// header).
func waitReady(t *testing.T, base, node string) {
	t.Helper()
	eventually(t, 30*time.Second, func() string {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return fmt.Sprintf("%s/readyz: %v", base, err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Deed-Node"); resp.StatusCode != 200 || got != node {
			return fmt.Sprintf("%s/readyz: %d from node %q, want 200 from %s", base, resp.StatusCode, got, node)
		}
		return ""
	})
}

func post(t *testing.T, url, body string) {
	t.Helper()
	resp, err := http.Post(url, "application/octet-stream", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
}

// waitFleetSeen waits until base's /v1/status shows every node alive, and
// the nodes of counts with those cell counts (a node advertises its count
// at each renewal, and peers read the leases, once per TTL/3 both).
func waitFleetSeen(t *testing.T, base string, counts map[string]int) {
	t.Helper()
	eventually(t, 30*time.Second, func() string {
		st, b, err := get(base + "/v1/status")
		if err != nil || st != 200 {
			return fmt.Sprintf("%s/v1/status: %d %s %v", base, st, b, err)
		}
		var s struct {
			Nodes []struct {
				Node     string `json:"node"`
				Alive    bool   `json:"alive"`
				Released bool   `json:"released"`
				Cells    int    `json:"cells"`
			} `json:"nodes"`
		}
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Sprintf("%s/v1/status: %v: %s", base, err, b)
		}
		alive, cells, released := map[string]bool{}, map[string]int{}, map[string]bool{}
		for _, n := range s.Nodes {
			alive[n.Node], cells[n.Node], released[n.Node] = n.Alive, n.Cells, n.Released
		}
		// A node learns of other leases from its listing of nodes/, once
		// per renewal interval: worker-1's released lease is on the page
		// only once a listing has seen it.
		if !released["worker-1"] {
			return fmt.Sprintf("%s does not see worker-1's lease released yet: %s", base, b)
		}
		for _, n := range nodes {
			if !alive[n] {
				return fmt.Sprintf("%s does not see %s alive yet: %s", base, n, b)
			}
		}
		for n, c := range counts {
			if cells[n] != c {
				return fmt.Sprintf("%s does not see %s with %d cells yet: %s", base, n, c, b)
			}
		}
		return ""
	})
}
