package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// peerHeaders are the header name/value pairs of a peer request from node
// from to node to, proved with secret (send's hdr).
func peerHeaders(secret, from, to, method, uri, body string, hops int) []string {
	req, _ := http.NewRequest(method, "http://x"+uri, strings.NewReader(body))
	req.Header.Set(headerHops, strconv.Itoa(hops))
	signPeerRequest(derivePeerKey(secret), req, from, to, []byte(body), time.Now())
	return []string{headerPeerProof, req.Header.Get(headerPeerProof), headerHops, strconv.Itoa(hops)}
}

// capture is a peer request as it went over the wire.
type capture struct {
	method, uri string
	hdr         http.Header
	body        []byte
}

// replay sends c again to node's handler, changed by edit.
func (f *testFleet) replay(node string, c capture, edit func(*http.Request)) *httptest.ResponseRecorder {
	req := httptest.NewRequest(c.method, c.uri, bytes.NewReader(c.body))
	req.Header = c.hdr.Clone()
	if edit != nil {
		edit(req)
	}
	rec := httptest.NewRecorder()
	f.handler(node).ServeHTTP(rec, req)
	return rec
}

// A captured peer request is good for itself once, within the window, and
// for nothing else: replayed as it is, it is refused by its nonce; one
// captured and kept from its target (so that its nonce is unused), sent
// changed (another path, query, body, hop count), to another node, or after
// the window, is refused by its MAC, its target or its timestamp
// (DEED-E041), and nothing is applied. A proof, even a good one, opens none
// of the endpoints that need the bearer token.
func TestCapturedPeerRequestCannotBeReused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		f := newTestFleet()
		var mu sync.Mutex
		var caps []capture
		deliver := true
		var cname string // the cell, placed on b (below)
		f.tap = func(r *http.Request, body []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			caps = append(caps, capture{r.Method, requestURI(r), r.Header.Clone(), body})
			return deliver
		}
		// capture appends data through a, forwarded to b; the forward is
		// delivered or kept from b.
		capture := func(data string, delivered bool) capture {
			t.Helper()
			mu.Lock()
			deliver = delivered
			first := len(caps) // a forward kept from b is sent on to the next node: b's is the first
			mu.Unlock()
			req := httptest.NewRequest("POST", "http://127.0.0.1/v1/cells/"+cname+"/append", strings.NewReader(data))
			req.Header.Set("Authorization", "Bearer client-token")
			rec := httptest.NewRecorder()
			f.handler("a").ServeHTTP(rec, req)
			if delivered && (rec.Code != 200 || rec.Header().Get(HeaderNode) != "b") {
				t.Fatalf("append through a: %d %s", rec.Code, rec.Body)
			}
			mu.Lock()
			defer mu.Unlock()
			got := caps[first]
			if p, err := parsePeerProof(got.hdr.Get(headerPeerProof)); err != nil || p.from != "a" || p.to != "b" {
				t.Fatalf("captured %+v, %v; want a forward from a to b", p, err)
			}
			return got
		}
		const ttl = 3 * time.Second
		f.openWith(t, m, "a", ttl, -1, APIConfig{Token: "client-token"})
		b := f.openWith(t, m, "b", ttl, -1, APIConfig{Token: "client-token"})
		f.openWith(t, m, "c", ttl, -1, APIConfig{Token: "client-token"})
		// A cell placed on b, so that a sends every request for it to b
		// (with or without a hint).
		for i := 0; cname == ""; i++ {
			if m, _ := preferred(fmt.Sprint("cell-", i), b.members()); m.Name == "b" {
				cname = fmt.Sprint("cell-", i)
			}
		}
		if _, err := b.acquire(t.Context(), cname, false); err != nil {
			t.Fatal(err)
		}
		c := capture("one", true)
		if c.hdr.Get(headerPeerProof) == "" || c.hdr.Get(headerPeerToken) != "" || strings.Contains(fmt.Sprint(c.hdr), testFleetSecret) {
			t.Fatalf("forwarded request headers %v: want a proof and no secret", c.hdr)
		}
		refused := func(what string, rec *httptest.ResponseRecorder) {
			t.Helper()
			if rec.Code != 401 {
				t.Errorf("%s: %d %s, want 401", what, rec.Code, rec.Body)
			}
		}
		refused("replayed as it is", f.replay("b", c, nil))
		for _, tc := range []struct {
			what string
			node string
			edit func(*http.Request)
		}{
			{"to another cell", "b", func(r *http.Request) { r.URL.Path, r.URL.RawPath = "/v1/cells/"+cname+"x/append", "" }},
			{"with a query", "b", func(r *http.Request) { r.URL.RawQuery = "x=1" }},
			{"with another body", "b", func(r *http.Request) {
				r.Body = io.NopCloser(strings.NewReader("two"))
				r.ContentLength = 3
			}},
			{"with more hops", "b", func(r *http.Request) { r.Header.Set(headerHops, "2") }},
			{"to another node", "c", nil},
		} {
			refused(tc.what, f.replay(tc.node, capture("kept", false), tc.edit))
		}
		// A good proof for an endpoint peers never use is ignored: the
		// bearer token is needed.
		for _, ep := range []struct{ method, path string }{
			{"POST", "/v1/node/drain"}, {"GET", "/v1/status"}, {"POST", "/v1/cells/" + cname + "/release"},
			{"POST", "/v1/cells/" + cname + "/claim"}, {"POST", "/v1/cells/" + cname + "/move?to=c"},
		} {
			h := peerHeaders(testFleetSecret, "a", "b", ep.method, ep.path, "", 1)
			req := httptest.NewRequest(ep.method, "http://127.0.0.1"+ep.path, nil)
			for i := 0; i < len(h); i += 2 {
				req.Header.Set(h[i], h[i+1])
			}
			rec := httptest.NewRecorder()
			f.handler("b").ServeHTTP(rec, req)
			refused("proof on "+ep.method+" "+ep.path, rec)
		}
		if b.ho.draining.Load() || b.held(cname) == nil {
			t.Fatal("b drains, or let the cell go")
		}
		// A capture kept from b, sent after the window.
		late := capture("late", false)
		time.Sleep(peerWindow + time.Second)
		refused("after the window", f.replay("b", late, nil))
		recs, err := replication.Read(t.Context(), m, cname, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 {
			t.Fatalf("the log has %d records, want the one append delivered", len(recs))
		}
	})
}

// An answer is relayed only when a holder of the fleet secret proved it: a
// squatter on a member's address (its process gone, another on its port)
// that answers an append "200, pos 1" is not believed, and the client is
// told the truth: the append was sent and its outcome is unknown
// (DEED-E012); a read through it is DEED-E013, retry.
func TestUnprovedAnswerIsNotRelayed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		f := newTestFleet()
		const ttl = 3 * time.Second
		f.open(t, m, "a", ttl, -1)
		b := f.open(t, m, "b", ttl, -1)
		cname := ""
		for i := 0; cname == ""; i++ {
			if mb, _ := preferred(fmt.Sprint("cell-", i), b.members()); mb.Name == "b" {
				cname = fmt.Sprint("cell-", i)
			}
		}
		if _, err := b.acquire(t.Context(), cname, false); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		f.hs["b"] = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(HeaderNode, "b")
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"cell":%q,"pos":1,"epoch":1,"records":[]}`, cname)
		})
		f.mu.Unlock()
		for _, tc := range []struct {
			method, path, body, code, applied string
		}{
			{"POST", "/v1/cells/" + cname + "/append", "x", "DEED-E012", "unknown"},
			{"GET", "/v1/cells/" + cname + "/records?barrier=true", "", "DEED-E013", "no"},
		} {
			rec := httptest.NewRecorder()
			f.handler("a").ServeHTTP(rec, httptest.NewRequest(tc.method, "http://127.0.0.1"+tc.path, strings.NewReader(tc.body)))
			var e struct{ Code, Applied string }
			_ = json.Unmarshal(rec.Body.Bytes(), &e)
			if rec.Code != 503 || e.Code != tc.code || e.Applied != tc.applied {
				t.Errorf("%s %s through a squatter: %d %s; want 503 %s applied %s", tc.method, tc.path, rec.Code, rec.Body, tc.code, tc.applied)
			}
		}
	})
}
