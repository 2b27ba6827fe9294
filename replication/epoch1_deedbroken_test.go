//go:build deedbroken

package replication_test

import (
	"testing"

	"github.com/deedkit/deed/replication"
)

// Without the implicit announcement of epoch 1, epoch 2's walk does not
// tombstone epoch 1's first slot, and epoch 1, which never announced,
// writes there after epoch 2's record was acknowledged: a restore follows
// epoch 1 and loses epoch 2's record.
func TestBrokenNoImplicitEpoch1LosesRecords(t *testing.T) {
	defer replication.SetBrokenNoImplicitEpoch1(true)()
	if err := epoch1Race(t); err == nil {
		t.Fatal("the broken rule kept every promise in the staged race")
	} else {
		t.Logf("caught: %v", err)
	}
}
