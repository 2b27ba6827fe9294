package owner_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// A lease verifies only when written by a node holding the fleet secret:
// a lease without a MAC, with one under another secret, or with any field
// changed after signing, is alive all the same (liveness is the ETag's) but
// not Verified.
func TestLeaseVerification(t *testing.T) {
	m := fakes3.NewMem()
	key := owner.LeaseKey("the fleet secret, 16+ bytes")
	a, err := owner.NewNode(m.Client("a"), owner.Config{Name: "a", Addr: "http://a", TTL: 10 * time.Second, LeaseKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer a.Close(t.Context())
	signed, err := m.Client("x").Get(t.Context(), owner.NodeKey("a"), owner.MaxRecordLen)
	if err != nil {
		t.Fatal(err)
	}
	other, err := owner.NewNode(m.Client("o"), owner.Config{Name: "o", Addr: "http://o", TTL: 10 * time.Second, LeaseKey: owner.LeaseKey("another secret, 16+ bytes")})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer other.Close(t.Context())

	put := func(node string, body []byte) {
		t.Helper()
		if _, err := m.Client("x").Put(t.Context(), owner.NodeKey(node), body, bucket.None); err != nil {
			t.Fatal(err)
		}
	}
	// The signed lease of a, copied under the name b, field for field
	// but the node: its MAC no longer matches.
	var rec map[string]any
	if err := json.Unmarshal(signed.Body, &rec); err != nil {
		t.Fatal(err)
	}
	rec["node"] = "b"
	b, _ := json.Marshal(rec)
	put("b", b)
	// a's lease with a weight of 1000 and its MAC kept.
	put("w", bytes.Replace(bytes.Replace(signed.Body, []byte(`"node":"a"`), []byte(`"node":"w"`), 1), []byte(`"cells"`), []byte(`"weight":1000,"cells"`), 1))
	// No MAC at all.
	put("nomac", []byte(`{"node":"nomac","incarnation":"i","addr":"http://evil","ttl_ms":10000,"seq":1,"at_ms":1,"weight":1000,"cells":0}`))

	obs := owner.NewObserver(m.Client("obs"), owner.Params{TTL: 10 * time.Second, Margin: time.Second}).VerifyWith(key)
	if err := obs.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"a": true, "b": false, "w": false, "nomac": false, "o": false}
	for _, v := range obs.View() {
		if v.Verified != want[v.Node] {
			t.Errorf("node %s: verified %v, want %v", v.Node, v.Verified, want[v.Node])
		}
		if !v.Alive {
			t.Errorf("node %s: judged dead; verification must not touch liveness", v.Node)
		}
	}
	// An observer without the key verifies nothing.
	plain := owner.NewObserver(m.Client("obs"), owner.Params{TTL: 10 * time.Second, Margin: time.Second})
	if err := plain.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, v := range plain.View() {
		if v.Verified {
			t.Errorf("node %s verified by an observer with no key", v.Node)
		}
	}
	// The node's own view of itself is verified too.
	for _, v := range a.Observer().View() {
		if v.Node == "a" && !v.Verified {
			t.Error("node a does not verify its own lease")
		}
	}
}

// A lease's size modulo 256 is the hash of its advertised fields: equal
// across renewals (seq, at_ms, cells change), different when one of them
// changes (but for 1 in 256).
func TestLeaseSizeClass(t *testing.T) {
	key := owner.LeaseKey("the fleet secret, 16+ bytes")
	base := owner.NodeRecord{Node: "a", Incarnation: "0123", Addr: "http://a", TTLMS: 10000, Seq: 1, AtMS: 1}
	size := func(r owner.NodeRecord) int { return owner.LeaseSizeForTest(r, key) % 256 }
	want := size(base)
	for _, r := range []owner.NodeRecord{
		{Node: "a", Incarnation: "0123", Addr: "http://a", TTLMS: 10000, Seq: 1234567890, AtMS: 1796188243102, Cells: 100000},
		{Node: "a", Incarnation: "0123", Addr: "http://a", TTLMS: 10000, Seq: 9, AtMS: 17, Cells: 7},
	} {
		if got := size(r); got != want {
			t.Errorf("renewal %+v: size class %d, want %d", r, got, want)
		}
	}
	changed := 0
	for _, r := range []owner.NodeRecord{
		{Node: "a", Incarnation: "0124", Addr: "http://a", TTLMS: 10000, Seq: 1, AtMS: 1},
		{Node: "a", Incarnation: "0123", Addr: "http://b", TTLMS: 10000, Seq: 1, AtMS: 1},
		{Node: "a", Incarnation: "0123", Addr: "http://a", TTLMS: 10000, Seq: 1, AtMS: 1, Draining: true},
		{Node: "a", Incarnation: "0123", Addr: "http://a", TTLMS: 10000, Seq: 1, AtMS: 1, Released: true},
		{Node: "a", Incarnation: "0123", Addr: "http://a", TTLMS: 10000, Seq: 1, AtMS: 1, Weight: 2},
	} {
		if size(r) != want {
			changed++
		}
	}
	if changed < 4 {
		t.Errorf("only %d of 5 changes of an advertised field changed the size class", changed)
	}
}
