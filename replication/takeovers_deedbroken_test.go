//go:build deedbroken

package replication_test

import (
	"testing"

	"github.com/deedkit/deed/replication"
)

// Racing takeovers must catch fencing without tombstones, a broken rule the
// model rejects. (Following the epoch named in a seal, the model's other
// broken rule, needs three owners racing in one order that these random
// schedules almost never produce since tombstones go only to announced
// epochs; TestBrokenPointerRuleLosesRecords stages it step by step.)
func TestBrokenNoTombstonesCaughtByRacingTakeovers(t *testing.T) {
	for _, v := range []struct {
		name string
		set  func(bool) (restore func())
	}{{"no-tombstones", replication.SetBrokenNoTombstones}} {
		t.Run(v.name, func(t *testing.T) {
			restore := v.set(true)
			defer restore()
			for seed := uint64(0); seed < 2000; seed++ {
				if err := simulate(t, seed, 4, 3); err != nil {
					t.Logf("seed %d: %v", seed, err)
					return
				}
			}
			t.Fatal("the simulation did not catch the broken rule")
		})
	}
}
