package main

import (
	"strings"
	"testing"

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
