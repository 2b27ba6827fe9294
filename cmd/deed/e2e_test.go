package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/errcode"
)

// End-to-end tests of the CLI's cell commands: the real binary (built once
// per test run by deedBinary, e2e_daemon_test.go) as separate processes
// against `deed fakes3` on loopback (newE2ECluster).

// TestExecHelperProcess is the command the e2e execs run: not a test. It
// appends "start <ns> <node>" to DEED_TEST_FILE, holds for 300ms, and
// appends "end <ns> <node>".
func TestExecHelperProcess(t *testing.T) {
	file := os.Getenv("DEED_TEST_FILE")
	if os.Getenv("DEED_TEST_HELPER") != "intervals" || file == "" {
		t.Skip("helper process for the e2e exec tests")
	}
	write := func(what string) {
		f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = fmt.Fprintf(f, "%s %d %s %s %s\n", what, time.Now().UnixNano(), os.Getenv(envExecNode), os.Getenv(envExecCell), os.Getenv(envExecEpoch))
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(99)
		}
	}
	write("start")
	time.Sleep(300 * time.Millisecond)
	write("end")
	os.Exit(0)
}

// e2eBucket opens the cluster's whole bucket from its environment.
func e2eBucket(t *testing.T, c *e2eCluster) bucket.Bucket {
	t.Helper()
	return e2eBucketPrefix(t, c, false)
}

// e2eBucketPrefix is e2eBucket, under the cluster's --bucket prefix when
// prefixed is set (the view the daemons have).
func e2eBucketPrefix(t *testing.T, c *e2eCluster, prefixed bool) bucket.Bucket {
	t.Helper()
	var endpoint, url string
	for _, kv := range c.env {
		if v, ok := strings.CutPrefix(kv, envEndpoint+"="); ok {
			endpoint = v
		}
		if v, ok := strings.CutPrefix(kv, envBucket+"="); ok {
			url = v
		}
	}
	loc, err := bucket.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	if !prefixed {
		loc.Prefix = ""
	}
	b, err := s3.Open(t.Context(), loc, s3.Options{Endpoint: endpoint,
		Credentials: credentials.NewStaticCredentialsProvider(c.creds.AccessKeyID, c.creds.SecretAccessKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestE2EExecNeverOverlaps: concurrent `deed exec` on one cell, each with
// its own node id and --wait, all run, one at a time.
func TestE2EExecNeverOverlaps(t *testing.T) {
	c := newE2ECluster(t)
	bin := deedBinary(t)
	file := filepath.Join(t.TempDir(), "intervals")
	const runs = 3
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	type outcome struct {
		code int
		out  string
	}
	results := make([]outcome, runs)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, bin, "exec", "job", "--node", fmt.Sprintf("host-job%d", i), "--ttl", "2s", "--wait", "50s",
				"--", os.Args[0], "-test.run=^TestExecHelperProcess$")
			cmd.Env = append(append(os.Environ(), c.env...), "DEED_TEST_HELPER=intervals", "DEED_TEST_FILE="+file)
			out, _ := cmd.CombinedOutput()
			results[i] = outcome{cmd.ProcessState.ExitCode(), string(out)}
		}()
	}
	wg.Wait()
	t.Logf("%d execs took %v", runs, time.Since(start))
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("exec %d: exit %d\n%s", i, r.code, r.out)
		}
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	type interval struct {
		node               string
		start, end         int64
		epoch, cell        string
		startSeen, endSeen bool
	}
	byNode := map[string]*interval{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Fatalf("bad line %q in\n%s", line, raw)
		}
		ns, _ := strconv.ParseInt(f[1], 10, 64)
		iv := byNode[f[2]]
		if iv == nil {
			iv = &interval{node: f[2], cell: f[3], epoch: f[4]}
			byNode[f[2]] = iv
		}
		switch f[0] {
		case "start":
			iv.start, iv.startSeen = ns, true
		case "end":
			iv.end, iv.endSeen = ns, true
		}
	}
	var ivs []*interval
	for _, iv := range byNode {
		if !iv.startSeen || !iv.endSeen || iv.end < iv.start || iv.cell != "job" {
			t.Fatalf("incomplete interval %+v in\n%s", iv, raw)
		}
		ivs = append(ivs, iv)
	}
	if len(ivs) != runs {
		t.Fatalf("%d intervals, want %d:\n%s", len(ivs), runs, raw)
	}
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].start < ivs[j].start })
	for i := 1; i < len(ivs); i++ {
		if ivs[i].start <= ivs[i-1].end {
			t.Fatalf("%s started at %d before %s ended at %d: overlap\n%s", ivs[i].node, ivs[i].start, ivs[i-1].node, ivs[i-1].end, raw)
		}
		if ivs[i].epoch == ivs[i-1].epoch {
			t.Errorf("two runs at epoch %s", ivs[i].epoch)
		}
		t.Logf("%s ran %v after %s ended", ivs[i].node, time.Duration(ivs[i].start-ivs[i-1].end), ivs[i-1].node)
	}
}

// TestE2EExecBadNamesWriteNothing: bad cell and node names exit 2 before
// anything is written, node leases included.
func TestE2EExecBadNamesWriteNothing(t *testing.T) {
	c := newE2ECluster(t)
	for _, args := range [][]string{
		{"exec", "bad/name", "--node", "n1", "--", "true"},
		{"exec", "ok", "--node", "bad name", "--", "true"},
		{"claim", "ok", "--node", "x/y", "--hold"},
		{"claim", "a b", "--node", "n1", "--hold"},
		{"release", "ok", "--node", ".."},
		{"gc", "bad/name"},
	} {
		st, out := c.cli(t, args...)
		if st != 2 || !strings.HasPrefix(out, string(errcode.CodeInvalidName)+" ") {
			t.Errorf("deed %q: exit %d %q, want 2 and %s", args, st, out, errcode.CodeInvalidName)
		}
	}
	page, err := bucket.ListAll(t.Context(), e2eBucket(t, c), bucket.ListInput{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Objects) != 0 {
		t.Fatalf("bad names wrote %d objects, first %s", len(page.Objects), page.Objects[0].Key)
	}
}

// TestE2EStrayLogKeys: with the real binary, a stray key in a huge epoch
// (cells/x/ltx/e5000000000/junk) and a corrupt ownership record: a forced
// claim finishes at once, one above the newest epoch deed's own keys name,
// and gc --dry-run lists the stray. Then 5 lock-only claims (deed exec)
// write nothing under the log prefix, and the next claim still writes only
// its announcement, one seal and one tombstone: the first exec's claim took
// the fence's released end, so its record announced its epoch, and every
// later record carried that on (docs/design.md, "A claim that announces
// its epoch"); the lock-only epochs after it cost nothing.
func TestE2EStrayLogKeys(t *testing.T) {
	c := newE2ECluster(t)
	b := e2eBucket(t, c)
	ctx := t.Context()
	var prefix string
	for _, kv := range c.env {
		if v, ok := strings.CutPrefix(kv, envBucket+"="); ok {
			loc, err := bucket.ParseURL(v)
			if err != nil {
				t.Fatal(err)
			}
			if loc.Prefix != "" {
				prefix = loc.Prefix + "/"
			}
		}
	}
	if st, out := c.cli(t, "claim", "x", "--node", "a"); st != 0 {
		t.Fatalf("claim: %d %s", st, out)
	}
	stray := prefix + "cells/x/ltx/e5000000000/junk"
	for k, v := range map[string]string{stray: "junk", prefix + "cells/x/own.json": "not json"} {
		if _, err := b.Put(ctx, k, []byte(v), bucket.None); err != nil {
			t.Fatal(err)
		}
	}
	st, out := c.cli(t, "claim", "x", "--node", "b", "--force", "--json")
	if st != 0 || !strings.Contains(out, `"epoch":2`) {
		t.Fatalf("forced claim of a corrupt record: exit %d %s", st, out)
	}
	st, out = c.cli(t, "gc", "x", "--dry-run", "--json")
	if st != 0 || !strings.Contains(out, `"strays":["cells/x/ltx/e5000000000/junk"]`) {
		t.Fatalf("gc --dry-run: exit %d %s", st, out)
	}
	logKeys := func() int {
		page, err := bucket.ListAll(ctx, b, bucket.ListInput{Prefix: prefix + "cells/x/ltx/"})
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Objects)
	}
	before := logKeys()
	for i := range 5 {
		if st, out := c.cli(t, "exec", "x", "--node", fmt.Sprintf("job%d", i), "--", "true"); st != 0 {
			t.Fatalf("exec %d: %d %s", i, st, out)
		}
	}
	if n := logKeys(); n != before {
		t.Fatalf("5 lock-only claims wrote %d objects under the log prefix", n-before)
	}
	if st, out := c.cli(t, "claim", "x", "--node", "c", "--force"); st != 0 || !strings.Contains(out, "epoch 8") {
		t.Fatalf("claim after the execs: %d %s", st, out)
	}
	if n := logKeys(); n != before+3 {
		t.Fatalf("a claim after 5 lock-only epochs wrote %d objects under the log prefix, want 3 (announcement, the tombstone of the epoch own.json announced, seal)", n-before)
	}
}
