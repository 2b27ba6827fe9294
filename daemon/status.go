package daemon

import (
	"cmp"
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/deedkit/deed/owner"
)

// Status is what this node knows of the fleet at one moment: the status
// page (GET /) renders it and GET /v1/status answers it as JSON.
type Status struct {
	Node        string `json:"node"`
	Incarnation string `json:"incarnation,omitempty"` // "" while fenced
	Advertise   string `json:"advertise,omitempty"`
	Version     string `json:"version,omitempty"`
	Ready       bool   `json:"ready"`    // the node lease is held
	Draining    bool   `json:"draining"` // advertised as draining in its lease
	// Fleet says this node has a fleet secret: then only the nodes whose
	// lease verifies (Nodes[].verified) are members.
	Fleet bool      `json:"fleet"`
	Now   time.Time `json:"now"`
	// Nodes are this node's view of every node lease in the bucket (one
	// LIST per TTL/3): alive or not, address, weight, and the cells each
	// held at its last renewal. Empty while fenced.
	Nodes []owner.NodeView `json:"nodes"`
	// CellsHeld counts the cells held here (and those being claimed or
	// released, marked busy); Cells lists at most maxStatusCells of them,
	// the most recently used first.
	CellsHeld int          `json:"cells_held"`
	Cells     []StatusCell `json:"cells"`
	// Events are the recent takeovers, fences, moves, idle releases and
	// drains, newest first.
	Events []Event `json:"events"`
	// ForwardedBecause counts the requests for cells it does not hold
	// that this node forwarded to a live peer, since it started, because
	// it could not serve them itself: "fenced" (regaining its node lease)
	// and "draining".
	ForwardedBecause map[string]uint64 `json:"forwarded_because"`
}

// StatusCell is one cell held here.
type StatusCell struct {
	Cell     string    `json:"cell"`
	Epoch    uint64    `json:"epoch,omitempty"`
	LastUsed time.Time `json:"last_used"` // its last request here
	// Busy: a claim, release or move of the cell was under way, so its
	// epoch was not read (the page does not wait on a cell's lock, which a
	// claim holds across its store requests).
	Busy bool `json:"busy,omitempty"`
}

// freshenPeers starts, at most once per TTL/3 and in the background, a
// read of every peer's lease, so that the cell counts the status page shows
// are current: the LIST that keeps liveness current carries no body, and a
// renewal that changes only the count is not otherwise read. Only while
// someone looks at the page does it cost anything (one GET per peer per
// TTL/3); the page never waits for it.
func (d *Daemon) freshenPeers() {
	now := time.Now().UnixNano()
	last := d.peersRead.Load()
	if now-last < int64(d.cfg.TTL/3) || !d.peersRead.CompareAndSwap(last, now) {
		return
	}
	d.mu.Lock()
	n := d.node
	d.mu.Unlock()
	if n == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.TTL/3)
		defer cancel()
		n.Observer().ReadAll(ctx, d.cfg.Node)
	}()
}

// maxStatusCells bounds the cells the page lists, so that a node holding
// a hundred thousand cells still answers with a page a browser can show.
const maxStatusCells = 500

// status gathers this node's Status. It never waits on a store request:
// the node view is the observer's last, and a cell whose lock is taken is
// listed as busy.
func (d *Daemon) status() Status {
	d.freshenPeers()
	s := Status{Node: d.cfg.Node, Advertise: d.cfg.Advertise, Version: d.cfg.Version, Now: time.Now(), Ready: d.ready(),
		Fleet: d.cfg.FleetSecret != "",
		Nodes: []owner.NodeView{}, Cells: []StatusCell{},
		ForwardedBecause: map[string]uint64{"fenced": d.unable.fenced.Load(), "draining": d.unable.draining.Load()}}
	d.mu.Lock()
	n := d.node
	d.mu.Unlock()
	cells := d.cellEntries()
	if n != nil {
		s.Incarnation, s.Draining = n.Incarnation(), n.Draining()
		s.Nodes = n.Observer().View()
	}
	for _, c := range cells {
		sc := StatusCell{Cell: c.name}
		if used := c.lastUsed.Load(); used != 0 {
			sc.LastUsed = time.Unix(0, used)
		}
		if c.mu.TryLock() {
			held := c.lease != nil && c.lease.Err() == nil
			if held {
				sc.Epoch = c.lease.Epoch()
			}
			c.mu.Unlock()
			if !held {
				continue
			}
		} else {
			sc.Busy = true
		}
		s.Cells = append(s.Cells, sc)
	}
	s.CellsHeld = len(s.Cells)
	slices.SortFunc(s.Cells, func(a, b StatusCell) int {
		return cmp.Or(b.LastUsed.Compare(a.LastUsed), strings.Compare(a.Cell, b.Cell))
	})
	if len(s.Cells) > maxStatusCells {
		s.Cells = s.Cells[:maxStatusCells]
	}
	s.Events = d.events.recent()
	return s
}

// isTakeover reports whether a claim (its Claim hook's result and reason)
// took the cell from another node: one judged dead, or any owner when
// forced. A claim of a free, released or never-claimed cell, or of one this
// node's earlier incarnation held ("re-entry"), takes nothing from anyone.
func isTakeover(result, reason string) bool {
	return result == "ok" && (reason == "owner-dead" || reason == "forced")
}

// statusCSP lets the page load nothing at all: no script, no font, no
// request to another origin, nor to this one; its only style is inline, and
// its only image the empty data: icon, which keeps a browser from asking
// for /favicon.ico (a request the policy would refuse, with an error in
// the console).
const statusCSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// serveStatusPage answers GET / with the status page: server-rendered HTML,
// no script, no outside resource.
func (d *Daemon) serveStatusPage(w http.ResponseWriter, r *http.Request) {
	s := d.status()
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", statusCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderNode, d.cfg.Node)
	// Rendered into memory first, so that a template error is a 500, not
	// half a page under a 200.
	var b strings.Builder
	if err := statusTemplate.Execute(&b, s); err != nil {
		http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte(b.String()))
}

// serveStatusJSON answers GET /v1/status: the page's data for tools.
func (d *Daemon) serveStatusJSON(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(HeaderNode, d.cfg.Node)
	writeJSONStatus(w, http.StatusOK, d.status())
}

// webURL returns addr when it is an absolute http or https URL with a
// host, the only addresses the page makes links of: a node address comes
// from a lease in the bucket, which anyone with write access to it writes.
func webURL(addr string) (string, bool) {
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return "", false
	}
	return u.String(), true
}

// nodeState is a node's state on the page, in the words of `deed nodes`.
func nodeState(v owner.NodeView) string {
	switch {
	case v.Corrupt != "":
		return "corrupt"
	case v.Released:
		return "released"
	case !v.Exists:
		return "missing"
	case v.Alive && v.Draining:
		return "draining"
	case v.Alive:
		return "alive"
	}
	return "dead"
}

// stateClass is the colour of a node's state: a failure (dead, corrupt)
// is red, a node at work green, draining amber, and a clean stop (its lease
// released, or deleted by a finished deed exec) grey: nothing went wrong.
func stateClass(v owner.NodeView) string {
	switch nodeState(v) {
	case "alive":
		return "ok"
	case "draining":
		return "warn"
	case "released", "missing":
		return "meta"
	}
	return "bad"
}

// ago is how long before now t was, rounded for a person; "" for the
// zero time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm ago", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}

var statusTemplate = template.Must(template.New("status").Funcs(template.FuncMap{
	"webURL": func(addr string) string { u, _ := webURL(addr); return u },
	"state":  nodeState,
	"class":  stateClass,
	"ago":    ago,
	"utc":    func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"weight": func(w float64) float64 {
		if w <= 0 {
			return 1
		}
		return w
	},
	"alive": func(vs []owner.NodeView) int {
		n := 0
		for _, v := range vs {
			if v.Alive {
				n++
			}
		}
		return n
	},
	"more": func(s Status) int { return s.CellsHeld - len(s.Cells) },
}).Parse(statusHTML))

const statusHTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>deed · {{.Node}}</title>
<link rel="icon" href="data:,">
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
table{border-collapse:collapse}th,td{padding:.2em .8em .2em 0;text-align:left;vertical-align:top}
th{border-bottom:1px solid #999;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.meta{color:#555}.ok{color:#070}.bad{color:#b00}.warn{color:#a60}.self{font-weight:600}
code{font-size:.95em}
</style>
</head>
<body>
<h1>deed node <code id="node">{{.Node}}</code></h1>
<p class="meta">
{{if .Ready}}<span class="ok">ready</span>{{else}}<span class="bad">not ready (node lease not held)</span>{{end}}
{{- if .Draining}} · <span class="warn">draining</span>{{end}}
{{- with .Incarnation}} · incarnation <code>{{.}}</code>{{end}}
{{- with .Advertise}} · {{.}}{{end}}
{{- with .Version}} · version {{.}}{{end}}
· as of <time datetime="{{utc .Now}}">{{utc .Now}}</time>
</p>
<p class="meta" id="forwarded-because">forwarded because this node could not serve them: {{index .ForwardedBecause "fenced"}} while fenced · {{index .ForwardedBecause "draining"}} while draining</p>

<h2>Nodes ({{alive .Nodes}} alive of {{len .Nodes}})</h2>
{{if .Nodes}}
<table id="nodes">
<thead><tr><th>node</th><th>address</th><th>state</th><th>weight</th><th>cells held</th></tr></thead>
<tbody>
{{range .Nodes}}<tr id="node-{{.Node}}"{{if eq .Node $.Node}} class="self"{{end}}>
<td><code>{{.Node}}</code></td>
<td>{{if and (webURL .Addr) (or .Verified (not $.Fleet))}}<a href="{{webURL .Addr}}">{{webURL .Addr}}</a>{{else}}{{.Addr}}{{end}}</td>
<td class="{{if and $.Fleet (not .Verified)}}bad{{else}}{{class .}}{{end}}">{{state .}}{{if and $.Fleet (not .Verified)}}, unverified: not a member (its lease is not signed with this fleet's secret){{end}}{{with .Corrupt}}: {{.}}{{end}}</td>
<td class="n">{{weight .Weight}}</td>
<td class="n">{{.Cells}}</td>
</tr>
{{end}}</tbody>
</table>
<p class="meta">Cells held: as of each node's lease renewal that this node last read (read again, at most every third of a TTL, while this page is looked at).
A node whose lease is missing (a finished <code>deed exec</code> deletes its own) is shown for
its TTL and margin after it went, then forgotten.</p>
{{else}}<p>No node leases seen{{if not .Ready}} (this node is fenced){{end}}.</p>{{end}}

<h2>Cells held here ({{.CellsHeld}})</h2>
{{if .Cells}}
<table id="cells">
<thead><tr><th>cell</th><th>epoch</th><th>last activity</th></tr></thead>
<tbody>
{{range .Cells}}<tr>
<td><code>{{.Cell}}</code></td>
<td class="n">{{if .Busy}}<span class="warn">busy</span>{{else}}{{.Epoch}}{{end}}</td>
<td>{{if .LastUsed.IsZero}}–{{else}}<time datetime="{{utc .LastUsed}}">{{ago $.Now .LastUsed}}</time>{{end}}</td>
</tr>
{{end}}</tbody>
</table>
{{with more .}}<p>and {{.}} more</p>{{end}}
{{else}}<p>None.</p>{{end}}

<h2>Recent events</h2>
{{if .Events}}
<table id="events">
<thead><tr><th>when</th><th>kind</th><th>cell</th><th title="the other node involved: the one a cell moved to or from, or the one taken over">other node</th><th>detail</th></tr></thead>
<tbody>
{{range .Events}}<tr>
<td><time datetime="{{utc .At}}">{{ago $.Now .At}}</time></td>
<td>{{.Kind}}</td>
<td>{{with .Cell}}<code>{{.}}</code>{{end}}</td>
<td>{{with .Node}}<code>{{.}}</code>{{end}}</td>
<td>{{.Detail}}</td>
</tr>
{{end}}</tbody>
</table>
{{else}}<p>None since this node started.</p>{{end}}
<p class="meta">The same as JSON: <a href="/v1/status">/v1/status</a></p>
</body>
</html>
`
