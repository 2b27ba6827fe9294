package owner_test

import (
	"encoding/json"
	"testing"

	"github.com/deedkit/deed/bucket"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// A renewal cut off by Close can land after its answer was lost, so the
// lease in the bucket is one version past the ETag the node knows. Close
// still marks the lease released (adopting the version of its own
// incarnation) instead of failing with a 412 and leaving peers to wait
// out the TTL.
func TestCloseReleasesAfterALandedRenewal(t *testing.T) {
	m := fakes3.NewMem()
	n := newNode(t, m.Client("a"), "a")
	if err := n.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	key := owner.NodeKey("a")
	body, ok := m.Bytes(key)
	if !ok {
		t.Fatalf("%s missing", key)
	}
	var rec map[string]any
	if err := json.Unmarshal(body, &rec); err != nil {
		t.Fatal(err)
	}
	rec["seq"] = rec["seq"].(float64) + 1 // the renewal that landed unseen
	landed, _ := json.Marshal(rec)
	if _, err := m.Client("a").Put(t.Context(), key, landed, bucket.None); err != nil {
		t.Fatalf("put the landed renewal: %v", err)
	}
	if err := n.Close(t.Context()); err != nil {
		t.Fatalf("close after a renewal landed unseen: %v", err)
	}
	body, _ = m.Bytes(key)
	if err := json.Unmarshal(body, &rec); err != nil || rec["released"] != true {
		t.Fatalf("node lease after close: %s, want released", body)
	}
}
