//go:build deedbroken

package replication_test

import (
	"testing"

	"github.com/deedkit/deed/replication"
)

// A fencing walk that leaves out the epoch the replaced ownership record
// announced does not tombstone it: that epoch's late append lands beside
// the walker's on one position.
func TestBrokenWalkIgnoresUnmarkedLosesRecords(t *testing.T) {
	defer replication.SetBrokenWalkIgnoresUnmarked(true)()
	if err := unmarkedEpoch(t); err == nil {
		t.Fatal("the broken rule kept every promise")
	} else {
		t.Logf("caught: %v", err)
	}
}
