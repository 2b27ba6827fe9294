package owner_test

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/benchtest"
	"github.com/deedkit/deed/owner"
)

// An own.json far over MaxRecordLen is refused as corrupt (DEED-E030)
// without being read whole; a forced claim replaces it like any other
// corrupt record (If-Match on the ETag the refused read still returned).
func TestOversizedOwnershipRecord(t *testing.T) {
	m := fakes3.NewMem()
	key := owner.CellKey("c")
	m.Set(key, bytes.Repeat([]byte("x"), 64<<20))
	b := &benchtest.Counted{B: m}
	n := newNode(t, b, "a")
	defer func() {
		if got := b.LargestBody(); got > owner.MaxRecordLen {
			t.Errorf("a read held %d bytes, limit %d", got, owner.MaxRecordLen)
		}
	}()
	_, err := n.Claim(t.Context(), "c", owner.ClaimOptions{})
	mustCode(t, err, errcode.CodeCorruptOwner)
	if body, _ := m.Bytes(key); len(body) != 64<<20 {
		t.Fatalf("a refused claim wrote own.json (%d bytes now)", len(body))
	}
	_, _, err = owner.Inspect(t.Context(), b, "c")
	mustCode(t, err, errcode.CodeCorruptOwner)
	if _, err := owner.ReleaseCell(t.Context(), b, "c", "a", false); errcode.CodeOf(err) != errcode.CodeCorruptOwner {
		t.Fatalf("release of an oversized record: %v, want DEED-E030", err)
	}
	l, err := n.Claim(t.Context(), "c", owner.ClaimOptions{Force: true})
	if err != nil {
		t.Fatalf("forced claim over an oversized record: %v", err)
	}
	if r := record(t, m, "c"); r.Node != "a" || r.Epoch != l.Epoch() {
		t.Fatalf("own.json after the forced claim: %+v", r)
	}
}

// A claim on a record at the largest epoch used to write epoch 0 (and
// then report its own record as corrupt). It is refused with DEED-E030,
// forced or not, and nothing is written.
func TestClaimAtTheLargestEpochWritesNothing(t *testing.T) {
	for _, c := range []struct {
		name  string
		node  string
		force bool
	}{
		{"released", "", false},
		{"re-entry", "a", false},
		{"forced", "b", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := fakes3.NewMem()
			key := owner.CellKey("c")
			body, _ := jsonMarshal(owner.Record{Node: c.node, Epoch: math.MaxUint64, Nonce: "n", AtMS: 1})
			m.Set(key, body)
			_, err := newNode(t, m, "a").Claim(t.Context(), "c", owner.ClaimOptions{Force: c.force})
			mustCode(t, err, errcode.CodeCorruptOwner)
			if got, _ := m.Bytes(key); !bytes.Equal(got, body) {
				t.Fatalf("own.json changed to %s", got)
			}
		})
	}
	// A forced claim over a corrupt record starts above the newest data
	// epoch; at the largest one there is no epoch above.
	t.Run("forced over corrupt, data at the largest epoch", func(t *testing.T) {
		m := fakes3.NewMem()
		key := owner.CellKey("c")
		m.Set(key, []byte("garbage"))
		m.Set(fmt.Sprintf("%sltx/e%d/0000000000000001.ltx", owner.CellPrefix("c"), uint64(math.MaxUint64)), []byte("x"))
		_, err := newNode(t, m, "a").Claim(t.Context(), "c", owner.ClaimOptions{Force: true})
		mustCode(t, err, errcode.CodeCorruptOwner)
		if got, _ := m.Bytes(key); string(got) != "garbage" {
			t.Fatalf("own.json changed to %s", got)
		}
	})
}

func TestTTLRange(t *testing.T) {
	for _, c := range []struct {
		ttl time.Duration
		ok  bool
	}{
		{owner.MinTTL, true},
		{owner.DefaultTTL, true},
		{owner.MaxTTL, true},
		{time.Millisecond, false},
		{owner.MinTTL - 1, false},
		{owner.MaxTTL + 1, false},
		{math.MaxInt64, false},
		{-time.Second, false},
	} {
		err := owner.ValidateTTL(c.ttl)
		if (err == nil) != c.ok || (err != nil && errcode.CodeOf(err) != errcode.CodeBadRequest) {
			t.Errorf("ValidateTTL(%v) = %v, want ok=%v", c.ttl, err, c.ok)
		}
		_, err = owner.NewNode(fakes3.NewMem(), owner.Config{Name: "a", TTL: c.ttl})
		if (err == nil) != c.ok {
			t.Errorf("NewNode with TTL %v: %v, want ok=%v", c.ttl, err, c.ok)
		}
	}
}

// A node lease that is not one a node writes (not JSON, another node's
// name, no incarnation, an advertised TTL out of range, far too large) is
// reported corrupt (DEED-E030) by the observer and judged by its ETag
// with the observer's own TTL: garbage advertising a TTL of a thousand
// hours does not keep a node alive that long.
func TestObserverJudgesGarbageLeasesByETag(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		valid := owner.NodeRecord{Node: "ok", Incarnation: "i", TTLMS: ttl.Milliseconds(), Seq: 1, AtMS: 1}
		leases := map[string][]byte{"ok": must(jsonMarshal(valid)), "notjson": []byte("{"),
			"big": bytes.Repeat([]byte(" "), owner.MaxRecordLen+1)}
		for name, edit := range map[string]func(*owner.NodeRecord){
			"othername": func(r *owner.NodeRecord) { r.Node = "someone" },
			"noinc":     func(r *owner.NodeRecord) { r.Incarnation = "" },
			"longttl":   func(r *owner.NodeRecord) { r.TTLMS = 1000 * time.Hour.Milliseconds() },
			"hugettl":   func(r *owner.NodeRecord) { r.TTLMS = math.MaxInt64 },
			"shortttl":  func(r *owner.NodeRecord) { r.TTLMS = 1 },
		} {
			r := valid
			r.Node = name
			edit(&r)
			leases[name] = must(jsonMarshal(r))
		}
		for name, body := range leases {
			m.Set(owner.NodeKey(name), body)
		}
		obs := owner.NewObserver(m, owner.Params{TTL: ttl, Margin: margin})
		if err := obs.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
		for _, v := range obs.View() {
			if (v.Corrupt == "") != (v.Node == "ok") || !v.Exists || !v.Alive {
				t.Errorf("%s: %+v; want exists, alive (not yet judged) and corrupt unless it is the valid lease", v.Node, v)
			}
			if v.Corrupt != "" && !strings.HasPrefix(v.Corrupt, string(errcode.CodeCorruptOwner)) {
				t.Errorf("%s: corrupt %q", v.Node, v.Corrupt)
			}
		}
		time.Sleep(ttl + margin + time.Millisecond)
		if err := obs.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
		for _, v := range obs.View() {
			if v.Alive {
				t.Errorf("%s still alive after TTL+margin unchanged", v.Node)
			}
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
