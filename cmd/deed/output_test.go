package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/deedkit/deed/daemon/daemontest"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3/s3test"
)

// fullWriter takes room bytes, then fails like a full disk: the answer is
// cut short.
type fullWriter struct{ room int }

func (w *fullWriter) Write(p []byte) (int, error) {
	if len(p) <= w.room {
		w.room -= len(p)
		return len(p), nil
	}
	n := w.room
	w.room = 0
	return n, syscall.ENOSPC
}

// runCut runs the CLI in-process with a stdout that fails after room bytes.
func runCut(t *testing.T, env map[string]string, room int, args ...string) result {
	t.Helper()
	var errOut daemontest.SyncBuffer
	status := run(t.Context(), invocation{
		Args: args, Stdout: &fullWriter{room: room}, Stderr: &errOut,
		Getenv: func(k string) string { return env[k] }, Credentials: s3test.Credentials(),
	})
	return result{status: status, stderr: errOut.String()}
}

// An answer that could not be written (whole or in part) fails the command
// with DEED-E050, whatever wrote it: JSON, the probe's text, ls's table,
// a banner. It used to exit 0.
func TestOutputErrorsFailTheCommand(t *testing.T) {
	e := newCellEnv(t)
	wantExit(t, e.run(t, "claim", "c1"), 0, "")
	for _, tc := range []struct {
		name string
		room int
		args []string
	}{
		{"json", 0, []string{"--json", "version"}},
		{"json cut", 5, []string{"--json", "show", "c1"}},
		{"ls table", 3, []string{"ls"}},
		{"ls json", 0, []string{"ls", "--json"}},
		{"probe text", 10, []string{"probe"}},
		{"probe json", 0, []string{"--json", "probe"}},
		{"text", 0, []string{"show", "c1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCut(t, e.env, tc.room, tc.args...)
			coded := strings.HasPrefix(r.stderr, string(errcode.CodeOutput)+" ") || strings.HasPrefix(r.stderr, `{"code":"`+string(errcode.CodeOutput)+`"`)
			if r.status != 1 || !coded || !strings.Contains(r.stderr, "no space left on device") {
				t.Errorf("deed %q on a full stdout: exit %d %q, want 1 and %s", tc.args, r.status, r.stderr, errcode.CodeOutput)
			}
		})
	}
	// The same commands with room for their answer succeed.
	wantExit(t, runCut(t, e.env, 1<<20, "ls"), 0, "")
}

// The real binary with its stdout on /dev/full exits non-zero and says why.
func TestE2EOutputToAFullDevice(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full here: %v", err)
	}
	defer full.Close()
	cmd := exec.Command(deedBinary(t), "--json", "version")
	cmd.Stdout = full
	var errOut strings.Builder
	cmd.Stderr = &errOut
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(errOut.String(), `"code":"DEED-E050"`) {
		t.Fatalf("deed --json version > /dev/full: %v, stderr %q; want exit 1 and DEED-E050", err, errOut.String())
	}
}
