package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
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

// TestE2EReadmeFleet runs the README's fleet walkthrough as written: each
// terminal is a shell of its own, the binary and the ports are
// substituted, and "Ctrl-C in terminal 2" is a SIGINT to that terminal's
// deed. The three nodes share a `deed fakes3 --dir` store and a fleet
// secret; stopping node one must leave every record readable through the
// others, and the store and the other nodes running.
func TestE2EReadmeFleet(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("the walkthrough uses curl, which is not installed here")
	}
	bin := deedBinary(t)
	block := readmeBlock(t, "<!-- fleet walkthrough -->")
	s3, one, two, three := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	block = strings.NewReplacer("bin/deed", bin, "127.0.0.1:9000", s3, "127.0.0.1:7480", one, "127.0.0.1:7490", two, "127.0.0.1:7500", three).Replace(block)
	term := terminals(block)
	if len(term) != 5 {
		t.Fatalf("want 5 terminals in the walkthrough, got %d:\n%s", len(term), block)
	}
	dir := t.TempDir()
	// Terminals 1 to 4 end in a command that runs until Ctrl-C: the shell
	// execs it, so a SIGINT reaches deed as Ctrl-C would.
	long := func(n string) *proc {
		lines := term[n]
		lines[len(lines)-1] = "exec " + lines[len(lines)-1]
		return startShell(t, dir, strings.Join(lines, "\n"), nil)
	}
	store := long("1")
	waitS3(t, s3)
	nodes := map[string]*proc{}
	for i, n := range []struct{ term, name, addr string }{{"2", "one", one}, {"3", "two", two}, {"4", "three", three}} {
		nodes[n.name] = long(n.term)
		waitHTTP(t, "http://"+n.addr+"/readyz", 30*time.Second)
		_ = i
	}

	// Terminal 5 is one shell; at "Ctrl-C in terminal 2" it says so and
	// waits for the test to press it.
	ctrlC := regexp.MustCompile(`^# Ctrl-C in terminal (\d+)`)
	var script []string
	var pressed []string
	for _, line := range term["5"] {
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
		"appended to demo at position 2", // the CLI's append through node two
		"hello", "again",                 // deed read prints the records
		"held by node",
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
