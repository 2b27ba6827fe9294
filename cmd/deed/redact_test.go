package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
)

// An endpoint with user:pass@ is never printed with its password: not in
// the error of a command that cannot reach it, not in the debug log.
func TestEndpointPasswordIsRedacted(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		args []string
	}{
		{map[string]string{envBucket: "s3://b", envEndpoint: "http://user:hunter2@127.0.0.1:1"}, []string{"probe", "--log-level", "debug"}},
		{map[string]string{envBucket: "s3://b", envEndpoint: "http://user:hunter2@127.0.0.1:1"}, []string{"show", "c", "--log-level", "debug"}},
		{map[string]string{envBucket: "s3://b", envEndpoint: "ftp://user:hunter2@127.0.0.1:1"}, []string{"show", "c"}},
		{map[string]string{envBucket: "s3://b", envEndpoint: "http://user:hunter2@[::1"}, []string{"show", "c"}},
		{map[string]string{envAddr: "http://user:hunter2@127.0.0.1:1"}, []string{"append", "c", "x", "--retry-for", "0"}},
		{map[string]string{envAddr: "http://user:hunter2@127.0.0.1:1?x"}, []string{"append", "c", "x", "--retry-for", "0"}},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		r := deed(t, ctx, tc.env, tc.args...)
		cancel()
		if r.status == 0 {
			t.Errorf("deed %v: exit 0", tc.args)
		}
		if out := r.stdout + r.stderr; strings.Contains(out, "hunter2") {
			t.Errorf("deed %v printed the endpoint's password:\n%s", tc.args, out)
		}
	}
}

// The store's description (`deed run`'s banner, probe and bench reports)
// names the endpoint without its password.
func TestStoreDescriptionRedactsEndpoint(t *testing.T) {
	cfg := &config{endpoint: "https://user:hunter2@store.example:9000"}
	got := cfg.describe(bucket.Location{Bucket: "b"})
	if strings.Contains(got, "hunter2") || !strings.Contains(got, "store.example:9000") {
		t.Fatalf("describe = %q", got)
	}
}
