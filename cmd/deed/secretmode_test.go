//go:build unix

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A token or fleet secret file other users can read is refused before
// anything starts, DEED-E040 (exit 2) naming the chmod that fixes it; the
// same file at 0600 is used. (At 0644 both used to be accepted without a
// word.)
func TestWorldReadableSecretFilesRefused(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("0123456789abcdef-secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, mode := range []os.FileMode{0o644, 0o604, 0o660, 0o620} {
		for _, flag := range []string{"--token-file", "--fleet-secret-file"} {
			p := write("secret", mode)
			// Bounded, so that a daemon that accepts the file stops.
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			r := deed(t, ctx, nil, "run", "--listen", "127.0.0.1:0", "--s3-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"), flag, p)
			cancel()
			if r.status != 2 || !strings.HasPrefix(r.stderr, "DEED-E040 ") || !strings.Contains(r.stderr, "chmod 600 "+p) {
				t.Errorf("run %s at %04o: exit %d stderr %q, want 2 DEED-E040 saying chmod 600 %s", flag, mode, r.status, r.stderr, p)
			}
		}
		p := write("token", mode)
		r := deed(t, t.Context(), nil, "append", "c", "x", "--addr", "http://127.0.0.1:1", "--token-file", p)
		if r.status != 2 || !strings.Contains(r.stderr, "chmod 600 "+p) {
			t.Errorf("append --token-file at %04o: exit %d stderr %q", mode, r.status, r.stderr)
		}
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		p := write("ok", mode)
		if _, err := readTokenFile(p); err != nil {
			t.Errorf("token file at %04o: %v", mode, err)
		}
		if _, err := readFleetSecret(p); err != nil {
			t.Errorf("fleet secret at %04o: %v", mode, err)
		}
	}
	// Owned by root, readable by its group only: the service-group setup.
	p := write("group", 0o640)
	fi, _ := os.Stat(p)
	err := secretModeError(p, fi)
	if os.Getuid() == 0 && err != nil {
		t.Errorf("root-owned 0640: %v, want accepted", err)
	}
	if os.Getuid() != 0 && err == nil {
		t.Errorf("0640 owned by uid %d: accepted, want refused", os.Getuid())
	}
}
