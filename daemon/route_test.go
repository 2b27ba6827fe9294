package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

const testSecret = "fleet-secret-0123456789"

func TestDecideRoute(t *testing.T) {
	a := member{Name: "a", Addr: "http://a", Weight: 1}
	b := member{Name: "b", Addr: "http://b", Weight: 1}
	c := member{Name: "c", Addr: "http://c", Weight: 1}
	serve := routeVerdict{Action: routeServe}
	refuse := routeVerdict{Action: routeRefuse}
	to := func(m member) routeVerdict { return routeVerdict{Action: routeForward, To: m} }
	because := func(m member, why string) routeVerdict {
		return routeVerdict{Action: routeForward, To: m, Because: why}
	}
	for _, tc := range []struct {
		name string
		in   routeIn
		want routeVerdict
	}{
		// Before anything is tried here.
		{"no fleet: served as by a single daemon", routeIn{Self: "a", Preferred: b, HasPreferred: true}, serve},
		{"held here", routeIn{Fleet: true, Held: true, Self: "a", Preferred: b, HasPreferred: true}, serve},
		{"preferred here", routeIn{Fleet: true, Self: "a", Preferred: a, HasPreferred: true}, serve},
		{"client, preferred elsewhere", routeIn{Fleet: true, Self: "a", Preferred: b, HasPreferred: true}, to(b)},
		{"no view yet", routeIn{Fleet: true, Self: "a"}, serve},
		{"preferred without address", routeIn{Fleet: true, Self: "a", Preferred: member{Name: "b"}, HasPreferred: true}, serve},
		{"from a peer: served here whatever this node thinks", routeIn{Fleet: true, Hops: 1, From: "c", Self: "a", Preferred: b, HasPreferred: true}, serve},
		{"hinted holder first", routeIn{Fleet: true, Self: "a", Preferred: a, HasPreferred: true, Hint: c}, to(c)},
		{"hint never to self", routeIn{Fleet: true, Self: "a", Preferred: b, HasPreferred: true, Hint: a}, to(b)},
		{"hint is no reason to forward a peer's request", routeIn{Fleet: true, Hops: 1, From: "b", Self: "a", Hint: c}, serve},
		{"held here, whatever the hint", routeIn{Fleet: true, Held: true, Self: "a", Hint: c}, serve},
		// After the claim here was refused for a live holder.
		{"client, holder elsewhere", routeIn{Fleet: true, Self: "a", Holder: b}, to(b)},
		{"peer, holder a third node: one more hop", routeIn{Fleet: true, Hops: 1, From: "c", Self: "a", Holder: b}, to(b)},
		{"peer, holder is the sender: never back", routeIn{Fleet: true, Hops: 1, From: "b", Self: "a", Holder: b}, refuse},
		{"second hop already: never further", routeIn{Fleet: true, Hops: 2, From: "c", Self: "a", Holder: b}, refuse},
		{"holder is self: never to self", routeIn{Fleet: true, Self: "a", Holder: a}, refuse},
		{"holder without address", routeIn{Fleet: true, Self: "a", Holder: member{Name: "b"}}, refuse},
		{"no fleet: the refusal is the answer", routeIn{Self: "a", Holder: c}, refuse},
		// This node cannot serve a cell it does not hold.
		{"fenced, client: to the hint", routeIn{Fleet: true, Self: "a", Unable: "fenced", Hint: c, Alt: b, HasAlt: true}, because(c, "fenced")},
		{"fenced, client: to Alt", routeIn{Fleet: true, Self: "a", Unable: "fenced", Alt: b, HasAlt: true}, because(b, "fenced")},
		{"fenced, peer: to Alt while a hop is left", routeIn{Fleet: true, Hops: 1, From: "c", Self: "a", Unable: "fenced", Alt: b, HasAlt: true}, because(b, "fenced")},
		{"draining, peer: no hop left", routeIn{Fleet: true, Hops: 2, From: "c", Self: "a", Unable: "draining", Alt: b, HasAlt: true}, serve},
		{"draining, peer: never back", routeIn{Fleet: true, Hops: 1, From: "b", Self: "a", Unable: "draining", Alt: b, HasAlt: true}, serve},
		{"fenced: never to self", routeIn{Fleet: true, Self: "a", Unable: "fenced", Alt: a, HasAlt: true}, serve},
		{"fenced, no live member", routeIn{Fleet: true, Self: "a", Unable: "fenced"}, serve},
		{"fenced, held here", routeIn{Fleet: true, Held: true, Self: "a", Unable: "fenced", Alt: b, HasAlt: true}, serve},
		// After a forward reached nothing.
		{"unreachable hint: to the preferred", routeIn{Fleet: true, Self: "a", Hint: c, Preferred: b, HasPreferred: true, Unreachable: "c"}, to(b)},
		{"unreachable preferred: served here", routeIn{Fleet: true, Self: "a", Preferred: b, HasPreferred: true, Unreachable: "b"}, serve},
		{"fenced, unreachable Alt", routeIn{Fleet: true, Self: "a", Unable: "fenced", Alt: b, HasAlt: true, Unreachable: "b"}, serve},
	} {
		if got := decideRoute(tc.in); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// fleetNode is a daemon served on a real 127.0.0.1 port, advertising
// advertise (its own URL when empty).
type fleetNode struct {
	d   *Daemon
	srv *httptest.Server
}

func startFleetNode(t testing.TB, b bucket.Bucket, node, secret, advertise string, api APIConfig) *fleetNode {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	if advertise == "" {
		advertise = "http://" + srv.Listener.Addr().String()
	}
	d, err := Open(t.Context(), Config{Node: node, Advertise: advertise, TTL: 2 * time.Second, Version: testVersion, FleetSecret: secret, API: api},
		b, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = d.Handler()
	srv.Start()
	n := &fleetNode{d: d, srv: srv}
	t.Cleanup(func() {
		srv.Close()
		closeOK(t, d)
	})
	return n
}

// answer is one HTTP answer, its JSON body decoded.
type answer struct {
	status int
	hdr    http.Header
	body   map[string]any
}

func (a answer) code() string { s, _ := a.body["code"].(string); return s }

// send sends one request to url and decodes its JSON answer (else the
// body is {"raw": …}); hdr are header name/value pairs.
func send(t *testing.T, method, url, body string, hdr ...string) answer {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, hdr: resp.Header}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		a.body = map[string]any{"raw": string(raw)}
	} else if err := json.Unmarshal(raw, &a.body); err != nil {
		t.Fatalf("%s %s: bad JSON %q", method, url, raw)
	}
	return a
}

// hold makes n the holder of cell (a claim is an operator's act on one
// node, never routed) and appends rec there.
func hold(t *testing.T, n *fleetNode, cell, rec string) {
	t.Helper()
	if got := send(t, "POST", n.srv.URL+"/v1/cells/"+cell+"/claim", ""); got.status != 200 {
		t.Fatalf("claim %s on %s: %+v", cell, n.d.cfg.Node, got)
	}
	if got := send(t, "POST", n.srv.URL+"/v1/cells/"+cell+"/append", rec); got.status != 200 || got.hdr.Get(HeaderNode) != n.d.cfg.Node {
		t.Fatalf("append to %s on %s: %+v", cell, n.d.cfg.Node, got)
	}
}

// A request for a cell another live node holds is forwarded to it and its
// answer relayed: the holder's Deed-Node, the relaying node in
// Deed-Forwarded-By; appends land in the holder's log, barrier reads run
// there.
func TestForwardToHolder(t *testing.T) {
	m := fakes3.NewMem()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	b := startFleetNode(t, m.Client("b"), "b", testSecret, "", APIConfig{})
	hold(t, b, "c", "one")
	got := send(t, "POST", a.srv.URL+"/v1/cells/c/append", "two")
	if got.status != 200 || got.body["pos"] != 2.0 || got.hdr.Get(HeaderNode) != "b" || got.hdr.Get(headerForwardedBy) != "a" {
		t.Fatalf("append through a: %+v", got)
	}
	got = send(t, "GET", a.srv.URL+"/v1/cells/c/records?barrier=true", "")
	if got.status != 200 || len(got.body["records"].([]any)) != 2 || got.hdr.Get(HeaderNode) != "b" {
		t.Fatalf("barrier read through a: %+v", got)
	}
	if a.d.held("c") != nil {
		t.Fatal("a claimed the cell b holds")
	}
	if v := metricValue(t, a.d, `deed_forwarded_total{result="ok"}`); v != "2" {
		t.Fatalf("a forwarded %s requests, want 2", v)
	}
	// The holder's refusal is relayed as it is.
	got = send(t, "POST", a.srv.URL+"/v1/cells/c/append", "")
	if got.status != 400 || got.code() != string(errcode.CodeBadRequest) {
		t.Fatalf("empty append through a: %+v", got)
	}
}

// Every answer names the node that served it, errors and probes included.
func TestDeedNodeOnEveryAnswer(t *testing.T) {
	m := fakes3.NewMem()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{Token: "client-token"})
	auth := []string{"Authorization", "Bearer client-token"}
	for _, tc := range []struct {
		method, path string
		hdr          []string
		status       int
	}{
		{"GET", "/healthz", nil, 200},
		{"GET", "/readyz", nil, 200},
		{"GET", "/metrics", auth, 200},
		{"GET", "/v1/cells", auth, 200},
		{"GET", "/v1/cells", nil, 401},
		{"GET", "/v1/cells", []string{headerPeerToken, "wrong-secret-0123456789"}, 401},
		{"GET", "/v1/cells/c/records", peerHeaders("wrong-secret-0123456789", "b", "a", "GET", "/v1/cells/c/records", "", 1), 401},
		{"POST", "/v1/cells/c/append", auth, 400},
		{"POST", "/v1/cells/bad..name/append", append([]string{}, auth...), 400},
		{"DELETE", "/v1/cells", auth, 405},
		{"GET", "/nowhere", auth, 404},
	} {
		got := send(t, tc.method, a.srv.URL+tc.path, "", tc.hdr...)
		if got.status != tc.status || got.hdr.Get(HeaderNode) != "a" {
			t.Errorf("%s %s: %d, Deed-Node %q; want %d, a", tc.method, tc.path, got.status, got.hdr.Get(HeaderNode), tc.status)
		}
	}
	rec := httptest.NewRecorder()
	StartingHandler(APIConfig{Node: "a"}).ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/v1/cells", nil))
	if rec.Header().Get(HeaderNode) != "a" {
		t.Errorf("starting: no Deed-Node")
	}
}

// Only a good peer proof makes a request a peer's, and only on the peer
// endpoints: a wrong one, or one sent to a node without a secret, is
// DEED-E041; the fleet secret in the clear (the old Deed-Peer-Token) is
// refused; a peer's request needs no bearer token; without secrets nothing
// is ever forwarded.
func TestPeerAuthentication(t *testing.T) {
	m := fakes3.NewMem()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{Token: "client-token"})
	lone := startFleetNode(t, m.Client("lone"), "lone", "", "", APIConfig{})
	for _, tc := range []struct {
		name, url, secret, to string
		status                int
	}{
		{"right secret", a.srv.URL, testSecret, "a", 200},
		{"wrong secret", a.srv.URL, testSecret + "x", "a", 401},
		{"for another node", a.srv.URL, testSecret, "b", 401},
		{"to a node without a secret", lone.srv.URL, testSecret, "lone", 401},
	} {
		got := send(t, "GET", tc.url+"/v1/cells/c/records", "", peerHeaders(tc.secret, "z", tc.to, "GET", "/v1/cells/c/records", "", 1)...)
		if got.status != tc.status || (tc.status == 401 && got.code() != string(errcode.CodeUnauthorized)) {
			t.Errorf("%s: %+v, want %d", tc.name, got, tc.status)
		}
	}
	if got := send(t, "GET", a.srv.URL+"/v1/cells/c/records", "", headerPeerToken, testSecret); got.status != 401 {
		t.Errorf("the secret in the clear: %+v, want 401", got)
	}

	// Two nodes without a secret: a cell held by one is refused by the
	// other (DEED-E020, naming the owner), never forwarded.
	other := startFleetNode(t, m.Client("other"), "other", "", "", APIConfig{})
	hold(t, other, "c", "x")
	got := send(t, "POST", lone.srv.URL+"/v1/cells/c/append", "y")
	if got.status != 409 || got.code() != string(errcode.CodeHeld) || got.body["owner"] != "other" || got.hdr.Get(HeaderNode) != "lone" {
		t.Fatalf("append through lone: %+v", got)
	}
	if v := metricValue(t, lone.d, `deed_forwarded_total{result="ok"}`); v != "0" {
		t.Fatalf("lone forwarded %s requests", v)
	}

	// A node with another secret is no member: its lease does not verify,
	// so a never forwards to it; the client gets the refusal (DEED-E020,
	// naming the holder), not applied.
	c := startFleetNode(t, m.Client("c"), "c", "another-secret-0123456789", "", APIConfig{})
	hold(t, c, "d", "x")
	if err := a.d.node.Observer().Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	got = send(t, "POST", a.srv.URL+"/v1/cells/d/append", "y", "Authorization", "Bearer client-token")
	if got.status != 409 || got.code() != string(errcode.CodeHeld) || got.body["applied"] != "no" || got.hdr.Get(HeaderNode) != "a" {
		t.Fatalf("append through a to c: %+v", got)
	}
	if v := metricValue(t, a.d, `deed_forwarded_total{result="refused"}`); v != "0" {
		t.Fatalf("a sent %s requests to a node of another secret", v)
	}
}

// A request a peer forwarded is never forwarded back to it, nor beyond its
// second hop; a client cannot fake hops without the secret.
func TestForwardNeverLoops(t *testing.T) {
	m := fakes3.NewMem()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	b := startFleetNode(t, m.Client("b"), "b", testSecret, "", APIConfig{})
	hold(t, a, "c", "one")
	// As if a had forwarded a request for its own cell to b: b's claim is
	// refused for a, and b does not send it back.
	got := send(t, "POST", b.srv.URL+"/v1/cells/c/append", "two", peerHeaders(testSecret, "a", "b", "POST", "/v1/cells/c/append", "two", 1)...)
	if got.status != 409 || got.code() != string(errcode.CodeHeld) || got.hdr.Get(HeaderNode) != "b" {
		t.Fatalf("peer request back: %+v", got)
	}
	// A second hop is the last.
	got = send(t, "POST", b.srv.URL+"/v1/cells/c/append", "three", peerHeaders(testSecret, "z", "b", "POST", "/v1/cells/c/append", "three", 2)...)
	if got.status != 409 || got.code() != string(errcode.CodeHeld) {
		t.Fatalf("third hop: %+v", got)
	}
	if v := metricValue(t, b.d, `deed_forwarded_total{result="ok"}`); v != "0" {
		t.Fatalf("b forwarded %s requests", v)
	}
	// Hops claimed without the secret are ignored: the client's request
	// is forwarded as any other.
	got = send(t, "POST", b.srv.URL+"/v1/cells/c/append", "four", headerHops, "2")
	if got.status != 200 || got.hdr.Get(HeaderNode) != "a" || got.body["pos"] != 2.0 {
		t.Fatalf("client request with fake hops: %+v", got)
	}
}

// A forward that never reached the holder is DEED-E013, not applied; one
// the holder may have received but never answered is, for an append,
// DEED-E012 (applied unknown), for a read DEED-E013.
func TestForwardAnswersTellTheTruth(t *testing.T) {
	m := fakes3.NewMem()
	// b advertises the address of a front that either drops every request
	// once it has read it whole (the holder killed mid-request) or is not
	// listening at all (dial refused).
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	addr := "http://" + front.Listener.Addr().String()
	front.Start()
	defer front.Close()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	b := startFleetNode(t, m.Client("b"), "b", testSecret, addr, APIConfig{})
	for _, cell := range []string{"c", "d"} {
		hold(t, b, cell, "one")
	}

	got := send(t, "POST", a.srv.URL+"/v1/cells/c/append", "two")
	if got.status != 503 || got.code() != string(errcode.CodeAmbiguous) || got.body["applied"] != "unknown" || got.hdr.Get(HeaderNode) != "a" {
		t.Fatalf("append, holder gone mid-request: %+v", got)
	}
	got = send(t, "GET", a.srv.URL+"/v1/cells/c/records?barrier=true", "")
	if got.status != 503 || got.code() != string(errcode.CodePeer) || got.body["applied"] != "no" {
		t.Fatalf("barrier read, holder gone mid-request: %+v", got)
	}

	front.Close() // now nothing listens at b's address
	got = send(t, "POST", a.srv.URL+"/v1/cells/d/append", "two")
	if got.status != 503 || got.code() != string(errcode.CodePeer) || got.body["applied"] != "no" {
		t.Fatalf("append, holder unreachable: %+v", got)
	}
	if v := metricValue(t, a.d, `deed_forwarded_total{result="unreachable"}`); v != "1" {
		t.Errorf("unreachable forwards: %s, want 1", v)
	}
	if v := metricValue(t, a.d, `deed_forwarded_total{result="lost"}`); v != "2" {
		t.Errorf("lost forwards: %s, want 2", v)
	}
	// Nothing of the failed forwards reached b's log.
	got = send(t, "GET", b.srv.URL+"/v1/cells/d/records", "")
	if got.status != 200 || len(got.body["records"].([]any)) != 1 {
		t.Fatalf("read on b: %+v", got)
	}
}

// A free cell is claimed by its preferred node, whichever node is asked.
func TestFreeCellGoesToPreferredNode(t *testing.T) {
	m := fakes3.NewMem()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	b := startFleetNode(t, m.Client("b"), "b", testSecret, "", APIConfig{})
	// Each sees both now, rather than at its next LIST (every TTL/3).
	for _, n := range []*fleetNode{a, b} {
		if err := n.d.node.Observer().Refresh(t.Context()); err != nil || len(n.d.members()) != 2 {
			t.Fatalf("%s sees %v (%v)", n.d.cfg.Node, n.d.members(), err)
		}
	}
	held := map[string]int{}
	for i := range 20 {
		cell := fmt.Sprintf("cell-%d", i)
		want, _ := preferred(cell, a.d.members())
		got := send(t, "POST", a.srv.URL+"/v1/cells/"+cell+"/append", "x")
		if got.status != 200 || got.hdr.Get(HeaderNode) != want.Name {
			t.Fatalf("%s: %+v, want served by %s", cell, got, want.Name)
		}
		held[want.Name]++
	}
	if held["a"] == 0 || held["b"] == 0 {
		t.Fatalf("20 cells all on one node: %v", held)
	}
	// A barrier read of a free cell through the other node: the preferred
	// node claims it and runs the barrier.
	for i := range 4 {
		cell := fmt.Sprintf("read-%d", i)
		want, _ := preferred(cell, a.d.members())
		via := a
		if want.Name == "a" {
			via = b
		}
		got := send(t, "GET", via.srv.URL+"/v1/cells/"+cell+"/records?barrier=true", "")
		if got.status != 200 || got.hdr.Get(HeaderNode) != want.Name || via.d.held(cell) != nil {
			t.Fatalf("barrier read of free %s through %s: %+v, want served by %s", cell, via.d.cfg.Node, got, want.Name)
		}
	}
}

// movedErr is what a handoff returns for a cell it handed to another node.
type movedErr struct{ node, addr string }

func (e movedErr) Error() string                { return "moved to " + e.node }
func (e movedErr) MovedTo() (node, addr string) { return e.node, e.addr }

func TestHolderOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want member
		ok   bool
	}{
		{&owner.HeldError{Cell: "c", Owner: "b", Addr: "http://b"}, member{Name: "b", Addr: "http://b"}, true},
		{errcode.Wrap(&owner.HeldError{Cell: "c", Owner: "b", Addr: "http://b"}, "claim c"), member{Name: "b", Addr: "http://b"}, true},
		{fmt.Errorf("acquire: %w", movedErr{"c", "http://c"}), member{Name: "c", Addr: "http://c"}, true},
		{errcode.Errorf(errcode.CodeUnavailable, "store down"), member{}, false},
	} {
		got, ok := holderOf(tc.err)
		if got != tc.want || ok != tc.ok {
			t.Errorf("holderOf(%v) = %+v %v, want %+v %v", tc.err, got, ok, tc.want, tc.ok)
		}
	}
}

// A cell held by a node that is not its preferred one costs the node a
// client asks one refused claim, not one per request: the node that
// served it is remembered (for a TTL) and asked directly.
func TestHolderHintSparesRefusedClaims(t *testing.T) {
	m := fakes3.NewMem()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	b := startFleetNode(t, m.Client("b"), "b", testSecret, "", APIConfig{})
	if err := a.d.node.Observer().Refresh(t.Context()); err != nil || len(a.d.members()) != 2 {
		t.Fatalf("a sees %v (%v)", a.d.members(), err)
	}
	cell := ""
	for i := 0; cell == ""; i++ {
		if p, _ := preferred(fmt.Sprint("c", i), a.d.members()); p.Name == "a" {
			cell = fmt.Sprint("c", i)
		}
	}
	hold(t, b, cell, "one") // held by b, though a is its preferred node
	for i := range 5 {
		got := send(t, "POST", a.srv.URL+"/v1/cells/"+cell+"/append", "more")
		if got.status != 200 || got.hdr.Get(HeaderNode) != "b" {
			t.Fatalf("append %d through a: %+v", i, got)
		}
	}
	if v := metricValue(t, a.d, `deed_claims_total{reason="owner-alive",result="held"}`); v != "1" {
		t.Fatalf("a tried %s claims of the cell b holds, want 1", v)
	}
}

// A node that is starting (its old lease still live to its peers) proves
// its refusal of a peer's forward: the forwarder relays "not applied,
// retry" instead of a 401 it cannot believe (an append's "unknown"), and
// counts no refused or unverified forward.
func TestStartingNodeAuthenticatesPeers(t *testing.T) {
	m := fakes3.NewMem()
	starting := httptest.NewServer(StartingHandler(APIConfig{Node: "b"}.WithFleetSecret(testSecret)))
	defer starting.Close()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	b := startFleetNode(t, m.Client("b"), "b", testSecret, starting.URL, APIConfig{})
	hold(t, b, "c", "one")
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/v1/cells/c/append", "two"},
		{"GET", "/v1/cells/c/records?barrier=true", ""},
	} {
		got := send(t, req.method, a.srv.URL+req.path, req.body)
		if got.status != 503 || got.code() != string(errcode.CodeUnavailable) || got.body["applied"] != "no" || got.hdr.Get(HeaderNode) != "b" {
			t.Fatalf("%s %s through a to starting b: %+v", req.method, req.path, got)
		}
	}
	for _, result := range []string{"refused", "unverified"} {
		if v := metricValue(t, a.d, `deed_forwarded_total{result="`+result+`"}`); v != "0" {
			t.Errorf("%s forwards: %s, want 0", result, v)
		}
	}
}

// A forward that reached nothing (the peer's port refuses the dial: it
// stopped, its lease not yet seen gone) takes the next route instead of
// answering DEED-E013: here a free cell whose preferred node b is not
// listening is served by the next member.
func TestUnreachablePeerTakesNextRoute(t *testing.T) {
	m := fakes3.NewMem()
	gone := httptest.NewServer(http.NotFoundHandler())
	addr := gone.URL
	gone.Close() // nothing listens at b's address
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	startFleetNode(t, m.Client("b"), "b", testSecret, addr, APIConfig{})
	c := startFleetNode(t, m.Client("c"), "c", testSecret, "", APIConfig{})
	for _, n := range []*fleetNode{a, c} {
		if err := n.d.node.Observer().Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	cell := ""
	for i := 0; cell == ""; i++ {
		if p, _ := preferred(fmt.Sprint("c", i), a.d.members()); p.Name == "b" {
			cell = fmt.Sprint("c", i)
		}
	}
	got := send(t, "POST", a.srv.URL+"/v1/cells/"+cell+"/append", "one")
	if got.status != 200 || got.hdr.Get(HeaderNode) == "b" {
		t.Fatalf("append of %s (placed on unreachable b) through a: %+v", cell, got)
	}
	if v := metricValue(t, a.d, `deed_forwarded_total{result="rerouted"}`); v != "1" {
		t.Errorf("rerouted forwards: %s, want 1", v)
	}
}

// A fenced node (its node lease lost, regaining it) forwards a request for
// a cell a live peer holds rather than refuse it with DEED-E025.
func TestFencedNodeForwards(t *testing.T) {
	m := fakes3.NewMem()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	b := startFleetNode(t, m.Client("b"), "b", testSecret, "", APIConfig{})
	if err := a.d.node.Observer().Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	cell := "" // placed on b, so that b's rebalancer keeps it
	for i := 0; cell == ""; i++ {
		if p, _ := preferred(fmt.Sprint("c", i), a.d.members()); p.Name == "b" {
			cell = fmt.Sprint("c", i)
		}
	}
	hold(t, b, cell, "one")
	m.Partition("a", true)
	for !a.d.fencedNow() {
		time.Sleep(20 * time.Millisecond)
	}
	m.Partition("a", false) // a regains its lease after waiting out its old one (≥ TTL)
	served := 0
	for a.d.fencedNow() {
		got := send(t, "POST", a.srv.URL+"/v1/cells/"+cell+"/append", "x")
		if !a.d.fencedNow() {
			break
		}
		if got.status != 200 || got.hdr.Get(HeaderNode) != "b" {
			o := a.d.routeView()
			v, ok := o.Lookup("b")
			t.Fatalf("append %d through fenced a: %+v; b %+v %v; refresh %v", served, got, v, ok, o.Refresh(t.Context()))
		}
		served++
		time.Sleep(100 * time.Millisecond)
	}
	if served == 0 {
		t.Fatal("a regained its lease before any request reached it fenced")
	}
	if v := metricValue(t, a.d, `deed_forwarded_unable_total{reason="fenced"}`); v != fmt.Sprint(served) {
		t.Errorf("forwards because fenced: %s, want %d", v, served)
	}
	if got := a.d.status().ForwardedBecause["fenced"]; got != uint64(served) {
		t.Errorf("status page: %d forwarded because fenced, want %d", got, served)
	}
}

// A request routed to a member that cannot be dialled (it stopped, and
// this node's view of the leases has not seen it go yet) never reached it,
// so nothing was applied: it is routed once more without that member and
// served, not refused with DEED-E013. (A holder that cannot be dialled is
// still DEED-E013: TestForwardAnswersTellTheTruth.)
func TestForwardToAStoppedMemberIsRoutedAgain(t *testing.T) {
	m := fakes3.NewMem()
	front := httptest.NewServer(http.NotFoundHandler())
	addr := "http://" + front.Listener.Addr().String()
	front.Close() // nothing listens at b's address from now on
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	startFleetNode(t, m.Client("b"), "b", testSecret, addr, APIConfig{})
	if err := a.d.node.Observer().Refresh(t.Context()); err != nil || len(a.d.members()) != 2 {
		t.Fatalf("a sees %v (%v)", a.d.members(), err)
	}
	var cell string
	for i := 0; cell == ""; i++ {
		if mb, _ := preferred(fmt.Sprint("cell-", i), a.d.members()); mb.Name == "b" {
			cell = fmt.Sprint("cell-", i)
		}
	}
	got := send(t, "POST", a.srv.URL+"/v1/cells/"+cell+"/append", "x")
	if got.status != 200 || got.hdr.Get(HeaderNode) != "a" || got.body["pos"] != 1.0 {
		t.Fatalf("append of a cell placed on a stopped member: %+v, want 200 served by a", got)
	}
	got = send(t, "GET", a.srv.URL+"/v1/cells/"+cell+"/records?barrier=true", "")
	if got.status != 200 || len(got.body["records"].([]any)) != 1 {
		t.Fatalf("barrier read: %+v", got)
	}
	if v := metricValue(t, a.d, `deed_forwarded_total{result="rerouted"}`); v != "1" {
		t.Errorf("rerouted forwards: %s, want 1", v)
	}
}

// A peer that answers it is starting (its old lease still live) did
// nothing: the request is routed once more without it, here a free cell
// placed on it is served by the asked node.
func TestStartingPeerIsRoutedAround(t *testing.T) {
	m := fakes3.NewMem()
	starting := httptest.NewServer(StartingHandler(APIConfig{Node: "b"}.WithFleetSecret(testSecret)))
	defer starting.Close()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	startFleetNode(t, m.Client("b"), "b", testSecret, starting.URL, APIConfig{})
	if err := a.d.node.Observer().Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	cell := ""
	for i := 0; cell == ""; i++ {
		if p, _ := preferred(fmt.Sprint("s", i), a.d.members()); p.Name == "b" {
			cell = fmt.Sprint("s", i)
		}
	}
	got := send(t, "POST", a.srv.URL+"/v1/cells/"+cell+"/append", "x")
	if got.status != 200 || got.hdr.Get(HeaderNode) != "a" {
		t.Fatalf("append of %s (placed on starting b) through a: %+v", cell, got)
	}
}
