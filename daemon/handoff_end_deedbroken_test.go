//go:build deedbroken

package daemon

import (
	"slices"
	"testing"
	"testing/synctest"

	"github.com/deedkit/deed/replication"
)

// With the seal check off (the next epoch trusts the released chain end
// as named), the forged end of TestForgedHandoffEndFallsBackToTheWalk
// makes b write over a position a acknowledged: the check is what keeps
// the handoff's end a hint.
func TestBrokenTrustedHandoffEndLosesRecords(t *testing.T) {
	defer replication.SetBrokenTrustEnd(true)()
	synctest.Test(t, func(t *testing.T) {
		_, recs := handoffWithEnd(t, forgeEnd)
		if slices.Equal(recs, wantRecordsAfterHandoff) {
			t.Fatalf("the broken rule kept every record: %v", recs)
		}
		t.Logf("caught: records after the move %v, want %v", recs, wantRecordsAfterHandoff)
	})
}
