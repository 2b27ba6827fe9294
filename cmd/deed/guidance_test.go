package main

import (
	encjson "encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3/s3test"
)

// The tests in this file hold errors to saying what to do next: each names
// the mistake and the way out, with its code first.

// A bucket that does not exist is a configuration error (exit 2) that
// names the bucket, for a read, a listing and the daemon's start probe
// alike, in one clean sentence (once "probe: probe:" and "list :").
func TestMissingBucketIsConfiguration(t *testing.T) {
	tg := s3test.HTTPFake(t)
	for _, args := range [][]string{
		{"show", "x"},
		{"ls"},
		{"claim", "x"},
		{"probe"},
		{"run", "--node", "n1", "--listen", "127.0.0.1:0"},
	} {
		args = append(args, "--bucket", "s3://nosuch", "--endpoint", tg.Endpoint)
		r := deed(t, t.Context(), nil, args...)
		last := lastLine(r.stderr)
		if r.status != 2 || !strings.HasPrefix(last, "DEED-E040 ") || !strings.Contains(last, `bucket "nosuch" does not exist`) {
			t.Errorf("deed %s: exit %d, last line %q; want 2, DEED-E040 naming the bucket", strings.Join(args, " "), r.status, last)
		}
		for _, bad := range []string{"probe: probe:", "list :", "store unavailable", "outcome unknown"} {
			if strings.Contains(r.stderr, bad) {
				t.Errorf("deed %s: stderr has %q:\n%s", strings.Join(args, " "), bad, r.stderr)
			}
		}
	}
}

// An --endpoint without its scheme says what to write, not Go's URL parser's
// complaint, and sends nothing.
func TestEndpointWithoutScheme(t *testing.T) {
	r := deed(t, t.Context(), nil, "show", "x", "--bucket", "s3://b", "--endpoint", "127.0.0.1:7481")
	if r.status != 2 || !strings.HasPrefix(r.stderr, "DEED-E040 ") || !strings.Contains(r.stderr, "write http://127.0.0.1:7481") {
		t.Errorf("exit %d stderr %q; want 2, DEED-E040 saying to write http://127.0.0.1:7481", r.status, r.stderr)
	}
	if strings.Contains(r.stderr, "first path segment") {
		t.Errorf("stderr is the URL parser's: %q", r.stderr)
	}
}

// Refusals of a held cell say what the command can do: claim can --wait or
// --force, exec only --wait; a release by the wrong id names the holder's
// id and the flags that release as it.
func TestHeldRefusalsNameTheNextStep(t *testing.T) {
	e := newCellEnv(t)
	hold := e.start(t, "claim", "c", "--node", "d1", "--hold", "--ttl", "1s")
	hold.waitOut(t, "holding cell c for node d1 at epoch 1", 10*time.Second)

	r := e.run(t, "claim", "c")
	wantExit(t, r, 4, errcode.CodeHeld)
	if !strings.Contains(r.stderr, "held by live node d1") || !strings.Contains(r.stderr, "--wait DURATION") || !strings.Contains(r.stderr, "--force takes it over") {
		t.Errorf("claim of a held cell: %q", r.stderr)
	}
	r = e.run(t, "exec", "c", "--", "true")
	wantExit(t, r, 4, errcode.CodeHeld)
	if !strings.Contains(r.stderr, "--wait DURATION") || strings.Contains(r.stderr, "--force") {
		t.Errorf("exec of a held cell: %q", r.stderr)
	}
	r = e.run(t, "release", "c")
	wantExit(t, r, 4, errcode.CodeNotHolder)
	for _, want := range []string{"held by d1", "--node d1", "--as-node d1", "--force"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("release by another id lacks %q: %q", want, r.stderr)
		}
	}
}

// Without credentials the SDK would log "WARN falling back to IMDSv1" to
// stderr by itself, ahead of deed's own error: with --json stderr holds
// only JSON, and without it every line starts with the code. The instance
// metadata service is a local server that refuses, as one outside EC2
// does.
func TestNoCredentialsPrintsOnlyTheError(t *testing.T) {
	bin := deedBinary(t)
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	}))
	defer imds.Close()
	tg := s3test.HTTPFake(t)
	env := []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "AWS_EC2_METADATA_SERVICE_ENDPOINT=" + imds.URL}
	for _, json := range []bool{true, false} {
		args := []string{"show", "x", "--bucket", tg.Loc.String(), "--endpoint", tg.Endpoint}
		if json {
			args = append(args, "--json")
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Fatalf("deed %s: %v, want exit 2\n%s", strings.Join(args, " "), err, stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		for _, l := range lines {
			var v map[string]string
			if json && (encjson.Unmarshal([]byte(l), &v) != nil || v["code"] != string(errcode.CodeUnauthorized)) {
				t.Errorf("--json: stderr line is not deed's JSON error: %q", l)
			}
			if !json && !strings.HasPrefix(l, string(errcode.CodeUnauthorized)+" ") {
				t.Errorf("stderr line does not start with its code: %q", l)
			}
		}
	}
}

// A usage error names the command and shows its own usage line, not the
// root's.
func TestUsageErrorShowsTheCommandsUsage(t *testing.T) {
	r := deed(t, t.Context(), nil, "exec")
	if r.status != 2 || !strings.HasPrefix(r.stderr, "DEED-E040 deed exec: ") || !strings.Contains(r.stderr, "usage: deed exec CELL") ||
		!strings.Contains(r.stderr, "see 'deed exec --help'") {
		t.Errorf("deed exec: exit %d, stderr %q", r.status, r.stderr)
	}
}

// gc of a cell that was never claimed says so (a typo), instead of
// reporting nothing to delete.
func TestGCOfMissingCellSaysSo(t *testing.T) {
	e := newCellEnv(t)
	r := e.run(t, "gc", "nosuch")
	wantExit(t, r, 2, errcode.CodeBadRequest)
	if !strings.Contains(r.stderr, "no such cell") {
		t.Errorf("gc nosuch: %q", r.stderr)
	}
}

// --addr pointed at the S3 store (a common mix-up with --endpoint) says
// what it is, not "unauthorized".
func TestAddrAtTheStoreSaysSo(t *testing.T) {
	tg := s3test.HTTPFake(t)
	for _, args := range [][]string{{"append", "x", "hi"}, {"read", "x"}} {
		r := deed(t, t.Context(), nil, append(args, "--addr", tg.Endpoint)...)
		if r.status != 2 || !strings.HasPrefix(r.stderr, "DEED-E040 ") || !strings.Contains(r.stderr, "is an S3 store, not a deed daemon") {
			t.Errorf("deed %s at the store: exit %d, %q", args[0], r.status, r.stderr)
		}
	}
}
