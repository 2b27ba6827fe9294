package daemon

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// handoffWithEnd has node a append three records to cell c and retire it
// (its log seals, its release records the chain end), then push c to node
// b with the hint a's release left, its end changed by edit (nil: as
// released), and b append one more record. It returns the store requests
// for c from the push on (op and key below cells/c/, in the order served)
// and c's records as a reader finds them afterwards. Call it inside a
// synctest bubble.
func handoffWithEnd(t *testing.T, edit func(*owner.End)) (ops []string, recs []string) {
	t.Helper()
	m := fakes3.NewMem()
	var mu sync.Mutex
	counting := false
	m.Inject(fakes3.Rule{KeyPrefix: owner.CellPrefix("c"), Match: func(op fakes3.Op, key string) bool {
		mu.Lock()
		defer mu.Unlock()
		if counting {
			ops = append(ops, string(op)+" "+strings.TrimPrefix(key, owner.CellPrefix("c")))
		}
		return false
	}})
	f := newTestFleet()
	const ttl = 3 * time.Second
	a := f.open(t, m, "a", ttl, -1)
	f.open(t, m, "b", ttl, -1)
	time.Sleep(ttl) // each sees the other
	for i := range 3 {
		if _, status, path := f.appendFollowing(t, "a", "c", fmt.Sprintf("a%d", i)); status != 200 {
			t.Fatalf("append to a: %v", path)
		}
	}
	if _, err := a.retire(t.Context(), "c", "move"); err != nil {
		t.Fatal(err)
	}
	n, err := a.currentNode()
	if err != nil {
		t.Fatal(err)
	}
	hint, ok := n.ReleasedHint("c")
	if !ok || hint.End == nil {
		t.Fatalf("a's release left no hint with a chain end: %+v", hint)
	}
	if edit != nil {
		e := *hint.End
		edit(&e)
		hint.End = &e
	}
	mu.Lock()
	counting = true
	mu.Unlock()
	if _, err := a.pushHandoff(t.Context(), "c", member{Name: "b", Addr: "http://b", Weight: 1}, false, hint); err != nil {
		t.Fatalf("push: %v", err)
	}
	if _, status, path := f.appendFollowing(t, "b", "c", "b0"); status != 200 {
		t.Fatalf("append to b after the push: %v", path)
	}
	mu.Lock()
	counting = false
	mu.Unlock()
	got, err := replication.Read(t.Context(), m, "c", 0, 100)
	if err != nil {
		t.Fatalf("read c: %v", err)
	}
	for _, r := range got {
		recs = append(recs, fmt.Sprintf("%d:%s", r.Pos, r.Data))
	}
	return ops, recs
}

var wantRecordsAfterHandoff = []string{"1:a0", "2:a1", "3:a2", "4:b0"}

// The push carries the chain end a's release recorded, so b's claim and
// its log's open are one If-Match PUT (whose record announces the epoch:
// no marker, no re-check) and one GET of the seal it names, sent beside
// the PUT, with no LIST and no walk; the first append is one PUT more.
func TestHandoffCarriesTheChainEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ops, recs := handoffWithEnd(t, nil)
		if !slices.Equal(recs, wantRecordsAfterHandoff) {
			t.Fatalf("records after the move: %v, want %v", recs, wantRecordsAfterHandoff)
		}
		var kinds []string
		for _, o := range ops {
			kinds = append(kinds, strings.Fields(o)[0])
		}
		// The claim's PUT and the seal's GET are in flight together: either
		// may reach the store first, so the kinds are compared sorted.
		want := []string{"GET", "PUT", "PUT"} // the seal read beside the claim, the claim, the record
		slices.Sort(kinds)
		if !slices.Equal(kinds, want) {
			t.Errorf("b's claim, open and first append sent %v, want %v (%d requests)", ops, want, len(want))
		}
		t.Logf("push to first append on the target: %d requests: %v", len(ops), ops)
	})
}

// A push whose end names a slot that is not the chain's seal (a stale or
// forged header: here slot 2, which holds a record) costs the walk, never
// a record: b's log reads the named slot, finds no seal of that epoch at
// that position there, and lists and walks as without the header. (With
// the check off, TestBrokenTrustedHandoffEndLosesRecords, b writes over
// positions a acknowledged.)
func TestForgedHandoffEndFallsBackToTheWalk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ops, recs := handoffWithEnd(t, forgeEnd)
		if !slices.Equal(recs, wantRecordsAfterHandoff) {
			t.Fatalf("records after a move with a forged end: %v, want %v", recs, wantRecordsAfterHandoff)
		}
		if !slices.ContainsFunc(ops, func(o string) bool { return strings.HasPrefix(o, "LIST") }) {
			t.Errorf("b did not walk after the forged end: %v", ops)
		}
	})
}

// forgeEnd names slot 2 at position 2 (a record of a's, not its seal).
func forgeEnd(e *owner.End) { *e = owner.End{TxID: 2, Pos: 2} }

// The end is covered by the peer proof: a push whose Deed-Handoff-End was
// changed after signing is refused (DEED-E041) and claims nothing; one that
// is not "txid=T pos=P" is refused as a bad request (DEED-E040), also
// claiming nothing.
func TestHandoffEndIsProvedAndParsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		f := newTestFleet()
		const ttl = 3 * time.Second
		f.open(t, m, "a", ttl, -1)
		b := f.open(t, m, "b", ttl, -1)
		time.Sleep(ttl)
		push := func(signed, sent string) *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodPost, "http://b/v1/cells/c/handoff", bytes.NewReader(nil))
			req.Header.Set(headerHandoffEnd, signed)
			signPeerRequest(derivePeerKey(testFleetSecret), req, "a", "b", nil, time.Now())
			req.Header.Set(headerHandoffEnd, sent)
			rec := httptest.NewRecorder()
			f.handler("b").ServeHTTP(rec, req)
			return rec
		}
		for _, tc := range []struct {
			signed, sent string
			code         errcode.Code
		}{
			{"txid=5 pos=9", "txid=2 pos=2", errcode.CodeUnauthorized},
			{"txid=5 pos=9", "", errcode.CodeUnauthorized},
			{"txid=5", "txid=5", errcode.CodeBadRequest},
			{"txid=5 pos=9 x", "txid=5 pos=9 x", errcode.CodeBadRequest},
			{"txid=0 pos=9", "txid=0 pos=9", errcode.CodeBadRequest},
			{"txid=05 pos=9", "txid=05 pos=9", errcode.CodeBadRequest},
		} {
			rec := push(tc.signed, tc.sent)
			var body struct {
				Code  errcode.Code `json:"code"`
				Error string       `json:"error"`
			}
			decodeJSON(t, rec, &body)
			if body.Code != tc.code {
				t.Errorf("push signed with end %q, sent with %q: %d %s %s, want %s", tc.signed, tc.sent, rec.Code, body.Code, body.Error, tc.code)
			}
			if b.held("c") != nil {
				t.Fatalf("push signed with end %q, sent with %q: b claimed c", tc.signed, tc.sent)
			}
		}
	})
}
