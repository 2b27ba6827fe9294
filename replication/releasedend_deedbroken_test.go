//go:build deedbroken

package replication_test

import (
	"testing"

	"github.com/deedkit/deed/replication"
)

// Trusting the released chain end without reading its seal: a record that
// names a slot inside the chain makes the next epoch write over its
// predecessor's acknowledged records' positions.
func TestBrokenTrustEndLosesRecords(t *testing.T) {
	defer replication.SetBrokenTrustEnd(true)()
	if err := forgedEnd(t); err == nil {
		t.Fatal("the broken rule kept every promise")
	} else {
		t.Logf("caught: %v", err)
	}
}
