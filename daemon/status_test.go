package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// getPage sends method path to td with the Authorization header auth (if
// any) and returns the answer's status, headers and body, whatever its
// content type.
func getPage(t *testing.T, td *testDaemon, method, path string, auth ...string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, td.srv.URL+path, nil)
	if len(auth) > 0 {
		req.Header.Set("Authorization", auth[0])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

// openPeer opens a bare daemon (no HTTP) as another node of m, advertising
// addr in its node lease.
func openPeer(t *testing.T, m *fakes3.Mem, node, addr string) *Daemon {
	t.Helper()
	d, err := Open(t.Context(), Config{Node: node, Advertise: addr, TTL: 2 * time.Second}, m.Client(node), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDaemon(t, d) })
	return d
}

// refreshView makes td's node read every node lease now, rather than at
// its next renewal.
func refreshView(t *testing.T, td *testDaemon) {
	t.Helper()
	n, err := td.d.currentNode()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Observer().Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// The page lists every node with its address (a link only for http and
// https), this node's cells with their epochs, and the recent events.
func TestStatusPageListsNodesCellsAndEvents(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	openPeer(t, m, "b", "https://b.example:7480")
	for _, cell := range []string{"alpha", "beta"} {
		if st, res := a.call(t, "POST", "/v1/cells/"+cell+"/append", "x"); st != 200 {
			t.Fatalf("append %s: %d %v", cell, st, res)
		}
	}
	a.d.events.add(Event{Kind: "move", Cell: "gamma", Node: "b", Detail: "preferred node changed"})
	refreshView(t, a)

	st, hdr, body := getPage(t, a, "GET", "/")
	if st != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s\n%s", st, hdr.Get("Content-Type"), body)
	}
	if got := hdr.Get(HeaderNode); got != "a" {
		t.Errorf("%s header: %q, want a", HeaderNode, got)
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy: %q", csp)
	}
	for _, want := range []string{
		`<code id="node">a</code>`,
		`<a href="http://a">http://a</a>`,
		`<a href="https://b.example:7480">https://b.example:7480</a>`,
		"Nodes (2 alive of 2)",
		"Cells held here (2)",
		"<code>alpha</code>", "<code>beta</code>",
		"<td>move</td>", "<code>gamma</code>", "preferred node changed",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
	// No script, no outside resource: the page loads nothing, not even
	// /favicon.ico (its icon is an empty data: URL, which the policy allows).
	for _, bad := range []string{"<script", "src="} {
		if strings.Contains(body, bad) {
			t.Errorf("page contains %q", bad)
		}
	}
	if strings.Count(body, "<link") != 1 || !strings.Contains(body, `<link rel="icon" href="data:,">`) || !strings.Contains(hdr.Get("Content-Security-Policy"), "img-src data:") {
		t.Errorf("the page's only link must be the empty data: icon, which the policy allows")
	}
}

// A node address comes from a lease anyone with write access to the
// bucket can write: the page escapes it, and makes links only of http and
// https URLs. Event details are escaped as well.
func TestStatusPageEscapesHostileAddressesAndDetails(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	openPeer(t, m, "js", `javascript:alert(1)`)
	openPeer(t, m, "tag", `http://x/"><script>alert(2)</script>`)
	openPeer(t, m, "data", `data:text/html,<b>x</b>`)
	a.d.events.add(Event{Kind: "<img src=x>", Detail: `<script>alert(3)</script>`})
	refreshView(t, a)

	_, _, body := getPage(t, a, "GET", "/")
	for _, bad := range []string{"<script", `<a href="javascript:`, `<a href="data:`, "<img", "<b>x"} {
		if strings.Contains(body, bad) {
			t.Errorf("page contains %q:\n%s", bad, body)
		}
	}
	for _, want := range []string{
		"javascript:alert(1)", // shown as text
		"&lt;script&gt;alert(3)&lt;/script&gt;",
		"&lt;img src=x&gt;",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
	if strings.Count(body, "<a href=") != 3 { // a's own, the tag node's (escaped) http URL, /v1/status
		t.Errorf("links: %d, want 3:\n%s", strings.Count(body, "<a href="), body)
	}
}

func TestWebURLOnlyHTTP(t *testing.T) {
	for addr, want := range map[string]bool{
		"http://10.0.0.2:7480":   true,
		"https://node.internal/": true,
		"HTTPS://node.internal":  true,
		"javascript:alert(1)":    false,
		"JavaScript:alert(1)":    false,
		"data:text/html,x":       false,
		"//node.internal":        false,
		"node.internal:7480":     false,
		"http://user:pw@host":    false,
		"http:///path":           false,
		"":                       false,
	} {
		if _, ok := webURL(addr); ok != want {
			t.Errorf("webURL(%q) = %v, want %v", addr, ok, want)
		}
	}
}

// GET /v1/status is the page's data as JSON.
func TestStatusJSON(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	openPeer(t, m, "b", "http://127.0.0.1:1")
	if st, res := a.call(t, "POST", "/v1/cells/c1/append", "x"); st != 200 {
		t.Fatalf("append: %d %v", st, res)
	}
	refreshView(t, a)
	st, hdr, body := getPage(t, a, "GET", "/v1/status")
	if st != 200 || hdr.Get("Content-Type") != "application/json" || hdr.Get(HeaderNode) != "a" {
		t.Fatalf("GET /v1/status: %d %v\n%s", st, hdr, body)
	}
	var s Status
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if s.Node != "a" || !s.Ready || s.Incarnation == "" || s.Version != testVersion || s.Draining {
		t.Errorf("this node: %+v", s)
	}
	if len(s.Nodes) != 2 || s.Nodes[0].Node != "a" || s.Nodes[1].Node != "b" || !s.Nodes[1].Alive || s.Nodes[1].Addr != "http://127.0.0.1:1" {
		t.Errorf("nodes: %+v", s.Nodes)
	}
	if s.CellsHeld != 1 || len(s.Cells) != 1 || s.Cells[0].Cell != "c1" || s.Cells[0].Epoch != 1 || s.Cells[0].LastUsed.IsZero() {
		t.Errorf("cells: %d %+v", s.CellsHeld, s.Cells)
	}
	// The wire names tools rely on.
	var raw map[string]any
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"node", "incarnation", "ready", "draining", "now", "nodes", "cells_held", "cells", "events"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, body)
		}
	}
	cell := raw["cells"].([]any)[0].(map[string]any)
	for _, k := range []string{"cell", "epoch", "last_used"} {
		if _, ok := cell[k]; !ok {
			t.Errorf("cell lacks %q: %v", k, cell)
		}
	}
}

// The page lists at most maxStatusCells cells, the most recently used
// first, and says how many more are held.
func TestStatusCellsCappedByLastActivity(t *testing.T) {
	a := startTestDaemon(t, fakes3.NewMem(), "a", APIConfig{})
	const n = maxStatusCells + 3
	base := time.Now().Add(-time.Hour)
	for i := range n {
		h, err := a.d.acquire(t.Context(), fmt.Sprintf("c%03d", i), false)
		if err != nil {
			t.Fatal(err)
		}
		h.c.lastUsed.Store(base.Add(time.Duration(i) * time.Second).UnixNano())
	}
	s := a.d.status()
	if s.CellsHeld != n || len(s.Cells) != maxStatusCells {
		t.Fatalf("held %d, listed %d; want %d, %d", s.CellsHeld, len(s.Cells), n, maxStatusCells)
	}
	if s.Cells[0].Cell != fmt.Sprintf("c%03d", n-1) || s.Cells[maxStatusCells-1].Cell != "c003" {
		t.Errorf("order: first %s, last %s", s.Cells[0].Cell, s.Cells[maxStatusCells-1].Cell)
	}
	_, _, body := getPage(t, a, "GET", "/")
	if !strings.Contains(body, "and 3 more") {
		t.Errorf("page does not say how many more cells are held")
	}
}

// A cell whose lock is held (a claim or release under way) is listed as
// busy at once: the page does not wait for the store.
func TestStatusDoesNotWaitOnABusyCell(t *testing.T) {
	a := startTestDaemon(t, fakes3.NewMem(), "a", APIConfig{})
	if st, res := a.call(t, "POST", "/v1/cells/slow/append", "x"); st != 200 {
		t.Fatalf("append: %d %v", st, res)
	}
	a.d.mu.Lock()
	c := a.d.cells["slow"]
	a.d.mu.Unlock()
	c.mu.Lock()
	s := a.d.status()
	c.mu.Unlock()
	if len(s.Cells) != 1 || !s.Cells[0].Busy || s.Cells[0].Epoch != 0 {
		t.Fatalf("cells: %+v, want slow listed as busy", s.Cells)
	}
}

// Only GET (and HEAD) are served on /; other paths keep their 404.
func TestStatusPageMethodsAndPaths(t *testing.T) {
	a := startTestDaemon(t, fakes3.NewMem(), "a", APIConfig{})
	st, hdr, body := getPage(t, a, "POST", "/")
	if st != 405 || hdr.Get("Allow") != "GET, HEAD" || !strings.Contains(body, "DEED-E040") {
		t.Errorf("POST /: %d Allow=%q %s", st, hdr.Get("Allow"), body)
	}
	if st, _, _ := getPage(t, a, "HEAD", "/"); st != 200 {
		t.Errorf("HEAD /: %d", st)
	}
	for _, p := range []string{"/index.html", "/favicon.ico", "/v1/nothing"} {
		if st, _, body := getPage(t, a, "GET", p); st != 404 || !strings.Contains(body, "DEED-E040") {
			t.Errorf("GET %s: %d %s", p, st, body)
		}
	}
}

// With a token set, the page and its JSON need it like every endpoint.
func TestStatusPageNeedsTheToken(t *testing.T) {
	a := startTestDaemon(t, fakes3.NewMem(), "a", APIConfig{Token: "s3cret"})
	for _, p := range []string{"/", "/v1/status"} {
		if st, _, body := getPage(t, a, "GET", p); st != 401 || strings.Contains(body, "<html") {
			t.Errorf("GET %s without the token: %d", p, st)
		}
		if st, _, _ := getPage(t, a, "GET", p, "Bearer s3cret"); st != 200 {
			t.Errorf("GET %s with the token: %d", p, st)
		}
	}
}

// A claim that takes a cell from a dead or forced-out owner is a takeover
// event; a claim of a free cell is not.
func TestTakeoverIsAnEvent(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	b := startTestDaemon(t, m.Client("b"), "b", APIConfig{})
	if st, res := a.call(t, "POST", "/v1/cells/c/append", "x"); st != 200 {
		t.Fatalf("append: %d %v", st, res)
	}
	if st, res := b.call(t, "POST", "/v1/cells/free/claim", ""); st != 200 {
		t.Fatalf("claim free: %d %v", st, res)
	}
	if got := b.d.events.recent(); len(got) != 0 {
		t.Fatalf("a claim of a free cell made events: %+v", got)
	}
	if st, res := b.call(t, "POST", "/v1/cells/c/claim?force=true", ""); st != 200 {
		t.Fatalf("forced claim: %d %v", st, res)
	}
	got := b.d.events.recent()
	if len(got) != 1 || got[0].Kind != "takeover" || got[0].Cell != "c" || got[0].Detail != "forced" {
		t.Fatalf("events: %+v, want one forced takeover of c", got)
	}
	if _, _, body := getPage(t, b, "GET", "/"); !strings.Contains(body, "<td>takeover</td>") {
		t.Errorf("page does not show the takeover:\n%s", body)
	}
	// a never wrote to c again, so it learns of the takeover only when its
	// drain tries to seal c: its Close reports the lost lease.
	closeFails(t, a.d, "DEED-E021 for the cell b took over", func(err error) bool {
		return errcode.CodeOf(err) == errcode.CodeSuperseded && strings.Contains(err.Error(), "drain c:")
	})
}

func TestIsTakeover(t *testing.T) {
	for _, tc := range []struct {
		result, reason string
		want           bool
	}{
		{"ok", "owner-dead", true},
		{"ok", "forced", true},
		{"ok", "absent", false},
		{"ok", "released", false},
		{"ok", "re-entry", false},
		{"held", "owner-alive", false},
		{"error", "owner-dead", false},
	} {
		if got := isTakeover(tc.result, tc.reason); got != tc.want {
			t.Errorf("isTakeover(%s, %s) = %v", tc.result, tc.reason, got)
		}
	}
}

func TestAgo(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		0:                           "just now",
		5 * time.Second:             "5s ago",
		3 * time.Minute:             "3m ago",
		2*time.Hour + 5*time.Minute: "2h05m ago",
		72 * time.Hour:              "3d ago",
	} {
		if got := ago(now, now.Add(-d)); got != want {
			t.Errorf("ago(%v) = %q, want %q", d, got, want)
		}
	}
	if got := ago(now, time.Time{}); got != "" {
		t.Errorf("ago(zero) = %q", got)
	}
}

// A fenced node (no node lease, so no view of the others) still renders
// its page, and says why it shows no nodes.
func TestStatusPageOfAFencedNode(t *testing.T) {
	var b strings.Builder
	if err := statusTemplate.Execute(&b, Status{Node: "a", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"not ready", "No node leases seen (this node is fenced)", "Cells held here (0)", "None since this node started"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("page lacks %q:\n%s", want, b.String())
		}
	}
}

// A clean stop is not shown as a failure: released and missing (deleted
// by a finished exec) leases are grey, dead and corrupt ones red; the
// events' node column says whose it is.
func TestStatusPageColoursAndLabels(t *testing.T) {
	for _, c := range []struct {
		v    owner.NodeView
		want string
	}{
		{owner.NodeView{Exists: true, Alive: true}, "ok"},
		{owner.NodeView{Exists: true, Alive: true, Draining: true}, "warn"},
		{owner.NodeView{Exists: true, Released: true}, "meta"},
		{owner.NodeView{}, "meta"},
		{owner.NodeView{Exists: true}, "bad"},
		{owner.NodeView{Exists: true, Corrupt: "DEED-E030 x"}, "bad"},
	} {
		if got := stateClass(c.v); got != c.want {
			t.Errorf("%s (%+v): class %q, want %q", nodeState(c.v), c.v, got, c.want)
		}
	}
	var page strings.Builder
	st := Status{Node: "a", Ready: true, Now: time.Now(),
		Nodes:  []owner.NodeView{{Node: "a", Exists: true, Alive: true}, {Node: "x-exec-1", Exists: true, Released: true}},
		Events: []Event{{At: time.Now(), Kind: "move", Cell: "c", Node: "b", Detail: "out"}}}
	if err := statusTemplate.Execute(&page, st); err != nil {
		t.Fatal(err)
	}
	body := page.String()
	if !strings.Contains(body, `<td class="meta">released</td>`) {
		t.Errorf("a released node is not grey:\n%s", body)
	}
	if !strings.Contains(body, ">other node</th>") {
		t.Errorf("the events' node column has no label saying whose:\n%s", body)
	}
}
