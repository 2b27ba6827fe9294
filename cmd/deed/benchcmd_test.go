package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3/s3test"
)

// bucketKeys lists every key in the target's bucket.
func bucketKeys(t *testing.T, tg s3test.Target) []string {
	t.Helper()
	page, err := bucket.ListAll(t.Context(), tg.Bucket, bucket.ListInput{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range page.Objects {
		keys = append(keys, o.Key)
	}
	return keys
}

func TestBenchCommand(t *testing.T) {
	for _, tg := range s3test.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			r := deed(t, t.Context(), nil, "bench", "--bucket", tg.Loc.String(), "--endpoint", tg.Endpoint, "--ops", "12", "--duration", "1m")
			if r.status != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.status, r.stdout, r.stderr)
			}
			for _, want := range []string{"deed bench: " + tg.Loc.String() + " at " + tg.Endpoint, "scratch prefix deed-bench/",
				"conditional PUT", "GET", "claim", "append", "PUT RTTs", "records/PUT", "the scratch prefix lists empty"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
				}
			}
			if strings.Contains(r.stdout, "\r") {
				t.Errorf("progress shown on a non-terminal:\n%q", r.stdout)
			}
			if keys := bucketKeys(t, tg); len(keys) > 0 {
				t.Errorf("bench left %d keys, first %q", len(keys), keys[0])
			}
		})
	}
}

func TestBenchJSON(t *testing.T) {
	tg := s3test.HTTPFake(t)
	r := deed(t, t.Context(), nil, "--json", "bench", "--bucket", tg.Loc.String()+"/tenant", "--endpoint", tg.Endpoint,
		"--ops", "10", "--appenders", "4", "--claimers", "2", "--size", "64", "--prefix", "my-scratch")
	if r.status != 0 {
		t.Fatalf("exit %d, stderr %s", r.status, r.stderr)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("stdout is not one JSON report: %v\n%s", err, r.stdout)
	}
	for name, s := range map[string]*benchStats{"put": rep.Put, "get": rep.Get, "claim": rep.Claim, "append": rep.Append} {
		if s == nil || s.Ops != 10 || s.P50MS <= 0 || s.P99MS < s.P50MS || s.PerSec <= 0 {
			t.Errorf("%s: %+v", name, s)
		}
	}
	if rep.Prefix != "my-scratch" || rep.Size != 64 || !rep.Clean || rep.Deleted < 10+10+2 { // the PUT keys, the claimed cells, the append cell and its files
		t.Errorf("report: %+v", rep)
	}
	if rep.Claim.Workers != 2 || rep.Claim.PutRTTs <= 0 || rep.Append.Workers != 4 || rep.Append.RecordsPerPut < 1 {
		t.Errorf("claim %+v append %+v", rep.Claim, rep.Append)
	}
	if keys := bucketKeys(t, tg); len(keys) > 0 {
		t.Errorf("bench left %d keys, first %q", len(keys), keys[0])
	}
}

// A scratch prefix that holds anything is refused before anything is
// written, and what is there is left alone.
func TestBenchRefusesNonEmptyPrefix(t *testing.T) {
	tg := s3test.HTTPFake(t)
	if _, err := tg.Bucket.Put(t.Context(), "scratch/precious", []byte("x"), bucket.IfAbsent); err != nil {
		t.Fatal(err)
	}
	r := deed(t, t.Context(), nil, "bench", "--bucket", tg.Loc.String(), "--endpoint", tg.Endpoint, "--prefix", "scratch", "--ops", "3")
	if r.status != 2 || !strings.HasPrefix(r.stderr, "DEED-E040 ") || !strings.Contains(r.stderr, "not empty") {
		t.Fatalf("exit %d stderr %q, want 2 and DEED-E040", r.status, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout = %q, want nothing", r.stdout)
	}
	if keys := bucketKeys(t, tg); len(keys) != 1 || keys[0] != "scratch/precious" {
		t.Errorf("bucket holds %q, want only scratch/precious", keys)
	}
}

func TestBenchBadFlags(t *testing.T) {
	tg := s3test.HTTPFake(t)
	for _, args := range [][]string{
		{"--ops", "0", "--duration", "0"},
		{"--ops", "-1"},
		{"--appenders", "0"},
		{"--claimers", "0"},
		{"--size", "0"},
		{"--size", "2000000"},
		{"--prefix", "a//b"},
	} {
		r := deed(t, t.Context(), nil, append([]string{"bench", "--bucket", tg.Loc.String(), "--endpoint", tg.Endpoint}, args...)...)
		if r.status != 2 || !strings.HasPrefix(r.stderr, "DEED-E040 ") {
			t.Errorf("bench %q: exit %d stderr %q, want 2 and DEED-E040", args, r.status, r.stderr)
		}
	}
	if keys := bucketKeys(t, tg); len(keys) > 0 {
		t.Errorf("rejected runs wrote %q", keys)
	}
}

// --duration alone bounds every phase.
func TestBenchDuration(t *testing.T) {
	tg := s3test.HTTPFake(t)
	start := time.Now()
	r := deed(t, t.Context(), nil, "--json", "bench", "--bucket", tg.Loc.String(), "--endpoint", tg.Endpoint, "--duration", "150ms")
	if r.status != 0 {
		t.Fatalf("exit %d, stderr %s", r.status, r.stderr)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("four phases of 150ms took %v", d)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Put.Ops == 0 || rep.Append.Ops == 0 || rep.Put.Seconds > 5 || !rep.Clean {
		t.Errorf("report: put %+v append %+v clean %v", rep.Put, rep.Append, rep.Clean)
	}
}

// An interrupted bench still deletes everything it wrote.
func TestBenchInterruptedCleansUp(t *testing.T) {
	tg := s3test.HTTPFake(t)
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	r := deed(t, ctx, nil, "bench", "--bucket", tg.Loc.String(), "--endpoint", tg.Endpoint, "--duration", "1m")
	if r.status == 0 {
		t.Fatalf("an interrupted bench exited 0\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "the scratch prefix lists empty") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	if keys := bucketKeys(t, tg); len(keys) > 0 {
		t.Errorf("interrupted bench left %d keys, first %q", len(keys), keys[0])
	}
}

// On a terminal the bench draws a self-overwriting progress line; with
// --json it draws none, so stdout stays one JSON document.
func TestBenchProgressOnTerminal(t *testing.T) {
	old := isTerminal
	isTerminal = func(io.Writer) bool { return true }
	t.Cleanup(func() { isTerminal = old })
	tg := s3test.HTTPFake(t)
	r := deed(t, t.Context(), nil, "bench", "--bucket", tg.Loc.String(), "--endpoint", tg.Endpoint, "--duration", "500ms")
	if r.status != 0 {
		t.Fatalf("exit %d, stderr %s", r.status, r.stderr)
	}
	for _, want := range []string{"\r\033[Kput", "\r\033[Kappend", "done"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%q", want, r.stdout)
		}
	}
	r = deed(t, t.Context(), nil, "--json", "bench", "--bucket", tg.Loc.String(), "--endpoint", tg.Endpoint, "--ops", "3")
	var rep benchReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); r.status != 0 || err != nil {
		t.Fatalf("exit %d, JSON %v:\n%q", r.status, err, r.stdout)
	}
}
