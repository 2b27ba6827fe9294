package s3test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A gateway that lost the port race must not be mistaken for ready: the
// endpoint answers (here the HTTP fake stands in for another test binary's
// gateway), but buckets created through it do not land in our directory, so
// verifyServer refuses it.
func TestVerifyServerRejectsAnotherProcessOnThePort(t *testing.T) {
	other := HTTPFake(t)
	ours := &proc{done: make(chan struct{})}

	err := verifyServer(other.Endpoint, t.TempDir(), "deed-probe-a", ours)
	if err == nil || !strings.Contains(err.Error(), "not the process started here") {
		t.Fatalf("verifyServer against a foreign server = %v, want a refusal", err)
	}

	// Control: when the marker does appear in the directory (as it does for
	// our own gateway), the same call passes; otherwise the refusal above
	// would prove nothing.
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "deed-probe-b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := verifyServer(other.Endpoint, dir, "deed-probe-b", ours); err != nil {
		t.Fatalf("verifyServer with the marker present = %v, want nil", err)
	}

	// A gateway that exited after answering is refused too.
	close(ours.done)
	if err := os.Mkdir(filepath.Join(dir, "deed-probe-c"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := verifyServer(other.Endpoint, dir, "deed-probe-c", ours); err == nil {
		t.Fatal("verifyServer accepted a gateway that had exited")
	}
}
