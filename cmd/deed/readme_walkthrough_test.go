package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeBlock returns the sh block that follows marker in the README.
func readmeBlock(t *testing.T, marker string) string {
	t.Helper()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), marker)
	if !ok {
		t.Fatalf("README has no %q", marker)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatalf("no sh block after %q", marker)
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("unterminated sh block after %q", marker)
	}
	return block
}

// terminals splits a walkthrough block at its "# terminal N" headers.
func terminals(block string) map[string][]string {
	out := map[string][]string{}
	cur := ""
	head := regexp.MustCompile(`^# terminal (\d+)`)
	for _, line := range strings.Split(block, "\n") {
		if m := head.FindStringSubmatch(line); m != nil {
			cur = m[1]
			continue
		}
		if strings.TrimSpace(line) != "" && cur != "" {
			out[cur] = append(out[cur], line)
		}
	}
	return out
}

// startShell runs script in sh as a separate process in dir, with no
// DEED_* or AWS_* variables from the test's environment.
func startShell(t *testing.T, dir, script string, stdin io.Reader) *proc {
	t.Helper()
	cmd := exec.Command("sh", "-e", "-c", script)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DEED_") && !strings.HasPrefix(kv, "AWS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdin = stdin
	return startCmd(t, cmd, "sh -c "+strconv.Quote(script))
}

// curlStandInEnv makes the test binary act as curl (see curlStandIn).
const curlStandInEnv = "DEED_TEST_AS_CURL"

// provideCurl makes sure the walkthrough's shells find a curl: the real one
// when it is installed, else the test binary standing in for it (the same
// requests, the same output), so that the walkthrough runs on every
// machine instead of skipping where curl is missing.
func provideCurl(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err == nil {
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := "#!/bin/sh\n" + curlStandInEnv + "=1 exec " + strconv.Quote(self) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "curl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Log("curl is not installed: the walkthrough's curl commands run through the test binary")
}

// curlStandIn is the subset of curl the README uses: [-X METHOD]
// [--data-binary DATA] URL. It prints the answer's body and, like curl
// without -f, exits 0 whatever the status; 7 when it cannot connect, 2 on
// anything else it does not understand (so a README that starts using more
// of curl fails here rather than sending another request).
func curlStandIn(args []string, stdout, stderr io.Writer) int {
	method, url := "", ""
	var body io.Reader
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case (a == "-X" || a == "--data-binary") && i+1 < len(args):
			i++
			if a == "-X" {
				method = args[i]
			} else if strings.HasPrefix(args[i], "@") {
				fmt.Fprintf(stderr, "curl stand-in: --data-binary @file is not supported\n")
				return 2
			} else {
				body = strings.NewReader(args[i])
			}
		case !strings.HasPrefix(a, "-") && url == "":
			url = a
		default:
			fmt.Fprintf(stderr, "curl stand-in: unsupported argument %q\n", a)
			return 2
		}
	}
	if method == "" {
		method = "GET"
		if body != nil {
			method = "POST"
		}
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		fmt.Fprintf(stderr, "curl stand-in: %v\n", err)
		return 2
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded") // as curl sends it
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "curl stand-in: %v\n", err)
		return 7
	}
	defer resp.Body.Close()
	if _, err := io.Copy(stdout, resp.Body); err != nil {
		fmt.Fprintf(stderr, "curl stand-in: %v\n", err)
		return 56
	}
	return 0
}

// TestE2EReadmeFleet runs the README's fleet walkthrough as written: each
// terminal is a shell of its own, the binary and the ports are
// substituted (each process listens on port 0 and the port it reports is
// put into the terminals after it), and "Ctrl-C in terminal 2" is a
// SIGINT to that terminal's deed. The three nodes share a `deed fakes3
// --dir` store and a fleet secret; stopping node one must leave every
// record readable through the others, and the store and the other nodes
// running.
func TestE2EReadmeFleet(t *testing.T) {
	provideCurl(t)
	bin := deedBinary(t)
	block := readmeBlock(t, "<!-- fleet walkthrough -->")
	block = strings.ReplaceAll(block, "bin/deed", bin)
	term := terminals(block)
	if len(term) != 5 {
		t.Fatalf("want 5 terminals in the walkthrough, got %d:\n%s", len(term), block)
	}
	// The README's addresses, each replaced by the one its process reports.
	const readmeS3 = "127.0.0.1:9000"
	readmeNodes := []struct{ term, name, addr string }{{"2", "one", "127.0.0.1:7480"}, {"3", "two", "127.0.0.1:7490"}, {"4", "three", "127.0.0.1:7500"}}
	addr := map[string]string{readmeS3: anyPort}
	for _, n := range readmeNodes {
		addr[n.addr] = anyPort
	}
	subst := func(n string) []string {
		var out []string
		for _, l := range term[n] {
			for from, to := range addr {
				l = strings.ReplaceAll(l, from, to)
			}
			out = append(out, l)
		}
		return out
	}
	dir := t.TempDir()
	// Terminals 1 to 4 end in a command that runs until Ctrl-C: the shell
	// execs it, so a SIGINT reaches deed as Ctrl-C would.
	long := func(n string) *proc {
		lines := subst(n)
		lines[len(lines)-1] = "exec " + lines[len(lines)-1]
		return startShell(t, dir, strings.Join(lines, "\n"), nil)
	}
	store := long("1")
	addr[readmeS3] = waitS3(t, store)
	nodes := map[string]*proc{}
	for _, n := range readmeNodes {
		nodes[n.name] = long(n.term)
		addr[n.addr] = strings.TrimPrefix(waitNode(t, nodes[n.name], n.name), "http://")
	}

	// Terminal 5 is one shell; at "Ctrl-C in terminal 2" it says so and
	// waits for the test to press it.
	ctrlC := regexp.MustCompile(`^# Ctrl-C in terminal (\d+)`)
	var script []string
	var pressed []string
	for _, line := range subst("5") {
		if m := ctrlC.FindStringSubmatch(line); m != nil {
			script = append(script, "echo CTRL-C-"+m[1], "read _")
			pressed = append(pressed, m[1])
			continue
		}
		script = append(script, line)
	}
	if len(pressed) != 1 || pressed[0] != "2" {
		t.Fatalf("want one Ctrl-C, in terminal 2: %q", pressed)
	}
	pr, pw := io.Pipe()
	defer pw.Close()
	t5 := startShell(t, dir, strings.Join(script, "\n"), bufio.NewReader(pr))
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(t5.out.String(), "CTRL-C-2") {
		select {
		case <-t5.done:
			t.Fatalf("terminal 5 ended before the Ctrl-C:\n%s", t5.out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("terminal 5 did not reach the Ctrl-C:\n%s", t5.out.String())
		}
	}
	nodes["one"].signal(t, syscall.SIGINT)
	if code := nodes["one"].wait(t, 30*time.Second); code != 0 {
		t.Fatalf("node one exited %d after Ctrl-C:\n%s", code, nodes["one"].out.String())
	}
	stopped := time.Now()
	if _, err := pw.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	_ = pw.Close() // os/exec waits for stdin to be drained
	if code := t5.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("terminal 5 exited %d:\n%s", code, t5.out.String())
	}
	t.Logf("terminal 5 finished %v after node one stopped", time.Since(stopped))
	out := t5.out.String()
	t.Logf("terminal 5:\n%s", out)
	for _, want := range []string{
		`"cell":"demo","epoch":1,"txid":1,"pos":1`, // the first append, wherever it landed
		b64("hello"),                     // read back through node three
		"held by node",                   // deed show
		"appended to demo at position 2", // the CLI's append through node two
		"hello", "again",                 // deed read prints both records
	} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal 5 lacks %q:\n%s", want, out)
		}
	}
	for name, p := range map[string]*proc{"the store": store, "node two": nodes["two"], "node three": nodes["three"]} {
		select {
		case <-p.done:
			t.Errorf("%s stopped with node one:\n%s", name, p.out.String())
		default:
		}
	}
	for _, name := range []string{"two", "three"} {
		nodes[name].signal(t, syscall.SIGINT)
		if code := nodes[name].wait(t, 30*time.Second); code != 0 {
			t.Errorf("node %s exited %d after Ctrl-C:\n%s", name, code, nodes[name].out.String())
		}
	}
}

// The curl stand-in sends what curl would for the README's commands, and
// refuses what it does not implement instead of guessing.
func TestCurlStandIn(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.RequestURI(), b)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"-X", "POST", "--data-binary", "hello", srv.URL + "/a"}, 0, "POST /a hello"},
		{[]string{srv.URL + "/r?after=0&barrier=true"}, 0, "GET /r?after=0&barrier=true "},
		{[]string{"--data-binary", "x", srv.URL}, 0, "POST / x"},
		{[]string{"-f", srv.URL}, 2, ""},
		{[]string{"--data-binary", "@file", srv.URL}, 2, ""},
		{[]string{"http://127.0.0.1:1/"}, 7, ""},
	} {
		var out, errOut strings.Builder
		if code := curlStandIn(tc.args, &out, &errOut); code != tc.code || out.String() != tc.out {
			t.Errorf("curl %q: exit %d %q (%s), want %d %q", tc.args, code, out.String(), errOut.String(), tc.code, tc.out)
		}
	}
}
