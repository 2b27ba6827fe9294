package daemon

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// releasedElsewhereOps has node b hold a cell whose preferred node is a
// (b claims it, as an operator's claim would, and appends one record),
// release it (through the API when viaAPI, which pushes a's hint; else
// by retire alone, which pushes nothing), then appends one record through
// b, which routes it to a. It returns the store requests for the cell
// (op and key below cells/<cell>/) from that append's start to its
// answer, and the node that served it. Call it inside a synctest bubble.
func releasedElsewhereOps(t *testing.T, viaAPI bool) (ops []string, servedBy string) {
	t.Helper()
	m := fakes3.NewMem()
	f := newTestFleet()
	const ttl = 3 * time.Second
	a := f.open(t, m, "a", ttl, -1) // no rebalancer: b keeps what it claims
	b := f.open(t, m, "b", ttl, -1)
	time.Sleep(ttl) // each sees the other
	cell := placedOnA(t, b)
	do := func(node, method, path, body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		f.handler(node).ServeHTTP(rec, httptest.NewRequest(method, "http://127.0.0.1/v1/cells/"+cell+path, strings.NewReader(body)))
		return rec
	}
	if rec := do("b", "POST", "/claim", ""); rec.Code != 200 {
		t.Fatalf("claim on b: %d %s", rec.Code, rec.Body)
	}
	if rec := do("b", "POST", "/append", "one"); rec.Code != 200 || rec.Header().Get(HeaderNode) != "b" {
		t.Fatalf("append on b: %d %s", rec.Code, rec.Body)
	}
	if viaAPI {
		if rec := do("b", "POST", "/release", ""); rec.Code != 200 {
			t.Fatalf("release on b: %d %s", rec.Code, rec.Body)
		}
	} else if _, err := b.retire(t.Context(), cell, "release"); err != nil {
		t.Fatal(err)
	}
	synctest.Wait() // the push, if any, has been answered
	var mu sync.Mutex
	counting := true
	remove := m.Inject(fakes3.Rule{KeyPrefix: owner.CellPrefix(cell), Match: func(op fakes3.Op, key string) bool {
		mu.Lock()
		defer mu.Unlock()
		if counting {
			ops = append(ops, string(op)+" "+strings.TrimPrefix(key, owner.CellPrefix(cell)))
		}
		return false
	}})
	defer remove()
	rec := do("b", "POST", "/append", "two")
	mu.Lock()
	counting = false
	mu.Unlock()
	if rec.Code != 200 {
		t.Fatalf("append through b after the release: %d %s", rec.Code, rec.Body)
	}
	if a.held(cell) == nil {
		t.Fatalf("a does not hold %s after the append (served by %s)", cell, rec.Header().Get(HeaderNode))
	}
	return ops, rec.Header().Get(HeaderNode)
}

// kinds is ops' request kinds, sorted: a claim's PUT and its seal's GET are
// in flight together, so their order is not fixed.
func kinds(ops []string) []string {
	var out []string
	for _, o := range ops {
		out = append(out, strings.Fields(o)[0])
	}
	slices.Sort(out)
	return out
}

// A release through the API of a cell whose preferred node is another one
// pushes the release's hint there, so that the next append, which routing
// sends there, costs 3 store requests (the If-Match claim on the released
// ETag, the seal's GET beside it, the record), not the 5 of a node that
// knows nothing of the cell (a refused create-only PUT, a read, the claim,
// the seal, the record), which the same release without the push costs.
func TestReleaseHintMakesTheNextNodesFirstAppendThreeRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ops, served := releasedElsewhereOps(t, true)
		if served != "a" {
			t.Fatalf("the append was served by %q, want a (the preferred node)", served)
		}
		if got, want := kinds(ops), []string{"GET", "PUT", "PUT"}; !slices.Equal(got, want) {
			t.Errorf("first append on a after b's release (pushed hint): %v, want kinds %v", ops, want)
		}
		t.Logf("with the push: %d requests: %v", len(ops), ops)
	})
	synctest.Test(t, func(t *testing.T) {
		ops, _ := releasedElsewhereOps(t, false)
		if len(ops) != 5 {
			t.Errorf("first append on a after b's release without a push: %d requests %v, want 5", len(ops), ops)
		}
		t.Logf("without the push: %d requests: %v", len(ops), ops)
	})
}

// Only a peer with the fleet secret may push a release hint: a client's,
// or one proved under another secret, is refused (401, DEED-E041) and
// nothing is noted.
func TestReleaseHintPushNeedsTheFleetSecret(t *testing.T) {
	m := fakes3.NewMem()
	f := newTestFleet()
	a := f.open(t, m, "a", 3*time.Second, -1)
	// The peer's last: the refused ones must find nothing noted.
	for _, tc := range []struct{ name, secret string }{{"client", ""}, {"wrong secret", "another-fleet-secret"}, {"fleet secret", testFleetSecret}} {
		name, secret := tc.name, tc.secret
		req := httptest.NewRequest("POST", "http://127.0.0.1/v1/cells/c/hint", nil)
		setHintHeaders(req.Header, owner.Hint{ReleasedETag: `"forged"`, Epoch: 7, End: &owner.End{TxID: 3, Pos: 3}})
		if secret != "" {
			req.Header.Set(headerHops, "1")
			signPeerRequest(derivePeerKey(secret), req, "b", "a", nil, time.Now())
		}
		rec := httptest.NewRecorder()
		f.handler("a").ServeHTTP(rec, req)
		n, err := a.currentNode()
		if err != nil {
			t.Fatal(err)
		}
		h, noted := n.ReleasedHint("c")
		if secret == testFleetSecret {
			if rec.Code != http.StatusNoContent || !noted || h.ReleasedETag != `"forged"` || h.Epoch != 7 {
				t.Errorf("a peer's hint: %d %s, noted %v %+v", rec.Code, rec.Body, noted, h)
			}
			continue
		}
		var body client.ErrorBody
		decodeJSON(t, rec, &body)
		if rec.Code != 401 || body.Code != errcode.CodeUnauthorized {
			t.Errorf("%s hint push: %d %s, want 401 DEED-E041", name, rec.Code, rec.Body)
		}
		if noted {
			t.Errorf("%s hint push was noted: %+v", name, h)
		}
	}
	if a.held("c") != nil {
		t.Fatal("a hint push claimed the cell")
	}
	if _, ok := m.Bytes(owner.CellKey("c")); ok {
		t.Fatal("a hint push wrote an ownership record")
	}
}

// An idle release pushes its hint as a release through the API does: the
// cell's preferred node (not the releaser) then knows what the release
// wrote, and its first append is the If-Match claim, the seal's GET and
// the record.
func TestIdleReleasePushesItsHint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		f := newTestFleet()
		const ttl = 3 * time.Second
		a := f.open(t, m, "a", ttl, -1)
		b := f.openConfig(t, m, Config{Node: "b", TTL: ttl, MoveRate: -1, IdleRelease: 2 * time.Second})
		time.Sleep(ttl) // each sees the other
		cell := placedOnA(t, b)
		rec := httptest.NewRecorder()
		f.handler("b").ServeHTTP(rec, httptest.NewRequest("POST", "http://127.0.0.1/v1/cells/"+cell+"/claim", nil))
		if rec.Code != 200 {
			t.Fatalf("claim on b: %d %s", rec.Code, rec.Body)
		}
		for b.held(cell) != nil {
			time.Sleep(100 * time.Millisecond)
		}
		synctest.Wait()
		n, err := a.currentNode()
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := n.ReleasedHint(cell); !ok || h.Epoch != 1 {
			t.Fatalf("a has no hint of b's idle release: %+v %v (pushes: %v ok, %v error, %v dropped)", h, ok,
				testCount(b.m.releaseHints.WithLabelValues(hintPushOK)), testCount(b.m.releaseHints.WithLabelValues(hintPushError)), testCount(b.m.releaseHints.WithLabelValues(hintPushDropped)))
		}
		var ops []string
		remove := m.Inject(fakes3.Rule{KeyPrefix: owner.CellPrefix(cell), Match: func(op fakes3.Op, key string) bool {
			ops = append(ops, string(op)+" "+strings.TrimPrefix(key, owner.CellPrefix(cell)))
			return false
		}})
		rec = httptest.NewRecorder()
		f.handler("a").ServeHTTP(rec, httptest.NewRequest("POST", "http://127.0.0.1/v1/cells/"+cell+"/append", strings.NewReader("x")))
		remove()
		if rec.Code != 200 || rec.Header().Get(HeaderNode) != "a" {
			t.Fatalf("append through a: %d %s", rec.Code, rec.Body)
		}
		if got, want := kinds(ops), []string{"GET", "PUT", "PUT"}; !slices.Equal(got, want) {
			t.Errorf("first append on a after b's idle release: %v, want kinds %v", ops, want)
		}
	})
}

// placedOnA is a cell that b, seeing both nodes of the fleet, places on a.
func placedOnA(t *testing.T, b *Daemon) string {
	t.Helper()
	for _, c := range cellNames(64) {
		if p, ok := preferred(c, b.members()); ok && p.Name == "a" && len(b.members()) == 2 {
			return c
		}
	}
	t.Fatalf("no cell placed on a among %v", b.members())
	return ""
}
