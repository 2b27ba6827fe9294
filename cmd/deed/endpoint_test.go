package main

import (
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/daemon"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

// --endpoint pointed at a daemon's API port (a plausible slip: both are
// local URLs) used to read as an empty bucket: show printed "never
// claimed" with exit 0 and release said DEED-E024. Now every command
// fails with DEED-E040 naming what answered.
func TestWrongEndpointIsNotS3(t *testing.T) {
	srv := serveDaemon(t, fakes3.NewMem(), "node-a", 2*time.Second, daemon.APIConfig{}, nil)
	if _, err := apiClient(t, srv.URL, "").Append(t.Context(), "demo", []byte("x")); err != nil {
		t.Fatalf("append: %v", err)
	}
	for _, args := range [][]string{
		{"show", "demo"},
		{"release", "demo", "--node", "node-a"},
		{"ls"},
		{"probe"},
	} {
		args = append(args, "--bucket", "s3://deed", "--endpoint", srv.URL)
		r := deed(t, t.Context(), nil, args...)
		if r.status != 2 || !strings.HasPrefix(r.stderr, string(errcode.CodeBadRequest)+" ") ||
			!strings.Contains(r.stderr, srv.URL) || !strings.Contains(r.stderr, "deed daemon") {
			t.Errorf("deed %q: exit %d\nstdout %q\nstderr %q\nwant exit 2, %s naming the daemon at %s", args, r.status, r.stdout, r.stderr, errcode.CodeBadRequest, srv.URL)
		}
	}
}

// read of a cell that was never claimed says so and fails (DEED-E040, exit
// 2); a claimed cell with no records reads as empty, exit 0.
func TestReadNeverClaimed(t *testing.T) {
	srv := serveDaemon(t, fakes3.NewMem(), "node-a", 2*time.Second, daemon.APIConfig{}, nil)
	c := apiClient(t, srv.URL, "")
	r := deed(t, t.Context(), nil, "read", "nope", "--addr", srv.URL)
	if r.status != 2 || !strings.HasPrefix(r.stderr, string(errcode.CodeBadRequest)+" ") || !strings.Contains(r.stderr, "never claimed") {
		t.Errorf("read of a never-claimed cell: exit %d %q %q", r.status, r.stdout, r.stderr)
	}
	if _, err := c.Claim(t.Context(), "empty", false); err != nil {
		t.Fatalf("claim: %v", err)
	}
	if r := deed(t, t.Context(), nil, "read", "empty", "--addr", srv.URL); r.status != 0 || r.stdout != "" {
		t.Errorf("read of a claimed, empty cell: exit %d %q %q", r.status, r.stdout, r.stderr)
	}
	if _, err := c.Append(t.Context(), "c", []byte("hello")); err != nil {
		t.Fatalf("append: %v", err)
	}
	if r := deed(t, t.Context(), nil, "read", "c", "--addr", srv.URL); r.status != 0 || r.stdout != "1\thello\n" {
		t.Errorf("read c: exit %d %q %q", r.status, r.stdout, r.stderr)
	}
}
