package main

import (
	"path/filepath"
	"testing"

	"github.com/deedkit/deed/errcode"
)

// Every --ttl outside owner.MinTTL..owner.MaxTTL is refused with DEED-E040
// before anything is written: a TTL near 2^63 ns overflowed deadline
// arithmetic and let a second `deed exec` run while the first held the
// cell, and 1ms cannot survive one slow renewal.
func TestTTLFlagsRefuseOutOfRange(t *testing.T) {
	e := newCellEnv(t)
	for _, ttl := range []string{"1ms", "0s", "-1s", "999ms", "1h0m1s", "2562047h47m16s"} {
		for _, args := range [][]string{
			{"exec", "job", "--node", "e1", "--ttl", ttl, "--", "true"},
			{"claim", "c", "--node", "a", "--ttl", ttl},
			{"claim", "c", "--node", "a", "--hold", "--ttl", ttl},
			{"run", "--node", "n", "--listen", "127.0.0.1:0", "--ttl", ttl, "--data-dir", filepath.Join(t.TempDir(), "d")},
			{"nodes", "--ttl", ttl},
		} {
			t.Run(args[0]+" "+ttl, func(t *testing.T) {
				wantExit(t, e.run(t, args...), 2, errcode.CodeBadRequest)
			})
		}
	}
	if keys := e.keys(t); len(keys) != 0 {
		t.Fatalf("refused commands wrote %v", keys)
	}
	wantExit(t, e.run(t, "claim", "c", "--node", "a", "--ttl", "1s"), 0, "")
}
