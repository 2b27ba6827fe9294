package daemon

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// Routing: any node of a fleet serves any cell. A request for a cell this
// node does not hold goes, in at most two hops, to the node that holds it
// or is placed to hold it, and that node's answer is relayed as it is.

const (
	// headerHops counts the forwards a request has had; honoured only on
	// a request that carries the right fleet secret.
	headerHops = "Deed-Hops"
	// headerForwardedBy names each node that relayed an answer, nearest
	// the client last; Deed-Node stays the node that served it.
	headerForwardedBy = "Deed-Forwarded-By"
	// headerMovedTo names, on a refusal (a *MovedError: nothing written),
	// the node the cell was just handed to. A forwarder that is that node
	// serves the request itself rather than relay the refusal: the old
	// holder waited for the handoff to land (movedAway) and may not send
	// the request back (the loop rule). Not covered by the answer's proof:
	// it can only make a node serve a request itself, which any node may.
	headerMovedTo = "Deed-Moved-To"
	// headerStarting marks the refusal of a node that is starting
	// (StartingHandler): nothing was done, and a forwarder routes the
	// request once more without that node, as if its dial had failed.
	headerStarting = "Deed-Starting"
	// headerNotHeld marks a read a peer forwarded that its receiver served
	// without holding the cell (from the bucket: the cell moved away from
	// it): the forwarder forgets it as the cell's holder instead of
	// sending it the next waiting read, which it would serve by polling
	// rather than wake on a commit. Not covered by the answer's proof: it
	// can only cost the forwarder one read of the ownership record.
	headerNotHeld = "Deed-Not-Held"
	// maxHops bounds the forwards of one request: a client's node may
	// send it to the preferred node, which may send it once more to the
	// live holder its claim was refused for. Never further, so a request
	// never loops, whatever the nodes' views of each other.
	maxHops = 2
	// peerTimeout bounds one forwarded request, below the Go client's
	// 60 s (client.DefaultTimeout), so that the relay's own answer (lost:
	// DEED-E012; unreachable: DEED-E013) reaches a client still waiting.
	peerTimeout = 50 * time.Second
	// peerDialTimeout bounds connecting to a peer: a dead host is known
	// to be unreachable (nothing sent, DEED-E013) within it.
	peerDialTimeout = 3 * time.Second
)

// peerKey is the context key of a request authenticated as a peer's.
type peerKey struct{}

// peerCall is what a peer's request says about its way here.
type peerCall struct {
	from string // the node that forwarded it
	hops int    // forwards so far, ≥ 1
}

// peerOf is the peer that forwarded r, if r carried a good peer proof.
func peerOf(ctx context.Context) (peerCall, bool) {
	p, ok := ctx.Value(peerKey{}).(peerCall)
	return p, ok
}

// routeAction is what a node does with a request for a cell.
type routeAction int

const (
	routeServe   routeAction = iota // serve it here (claiming the cell if free)
	routeForward                    // forward it to routeVerdict.To and relay the answer
	routeRefuse                     // answer the refusal the claim here got
)

// routeIn is everything the routing rule looks at.
type routeIn struct {
	Fleet        bool   // a fleet secret is configured (else: a single daemon)
	Held         bool   // this node holds the cell
	Hops         int    // 0 from a client; the forwards so far from a peer
	From         string // the peer that forwarded the request
	Self         string // this node
	Preferred    member // rendezvous choice over the live members
	HasPreferred bool   // false while the view has no member (fenced, starting)
	// Hint is the live peer that served the cell lately (holderHints).
	Hint member
	// Holder is the live node a claim here was refused for (DEED-E020),
	// or the node a cell was handed to; empty before anything was tried.
	Holder member
	// Unable says why this node cannot serve a cell it does not hold
	// ("fenced", "draining"); empty when it can.
	Unable string
	// Alt is the preferred member but this node, From and Unreachable,
	// where a node that is Unable sends the request.
	Alt    member
	HasAlt bool
	// Unreachable is a peer a forward of this request could not reach
	// (nothing sent); neither the hint nor Preferred names it.
	Unreachable string
}

// routeVerdict is the rule's answer.
type routeVerdict struct {
	Action routeAction
	To     member
	// Because is routeIn.Unable when this node forwards what it cannot
	// serve (counted in deed_forwarded_unable_total).
	Because string
}

// decideRoute is the routing rule, pure so that it can be tested whole.
//
// Before anything is tried here (no Holder): a cell held here, any cell
// without a fleet, and any request a peer forwarded are served here — a
// forwarded request is never sent back, even when the views of the two
// nodes disagree for a moment about where the cell belongs. A client's
// request goes to the live peer that served the cell lately, if any (so
// that a cell held away from its preferred node does not cost a refused
// claim per request), else to the preferred node, unless that is this node
// (or there is no view yet), which serves it, claiming the cell if free.
//
// After the claim here was refused because a live node holds the cell (or
// the cell was just handed to one): one more hop to that holder, unless it
// would be the request's second forward already, or go back to the node
// that sent it, or to this node, or to no known address; then the refusal
// is the answer.
//
// A node that cannot serve a cell it does not hold (fenced, draining: it
// would only refuse) sends the request on instead, within the same bound,
// never back and never to itself: a client's to the hint or Alt, a
// peer's to Alt while a hop is left. Only when there is none does it
// serve (refuse) it.
func decideRoute(in routeIn) routeVerdict {
	hint := in.Hint.Name != "" && in.Hint.Name != in.Self && in.Hint.Addr != "" && in.Hint.Name != in.Unreachable
	if in.Holder.Name == "" {
		if !in.Fleet || in.Held {
			return routeVerdict{Action: routeServe}
		}
		if in.Unable != "" {
			if in.Hops == 0 && hint {
				return routeVerdict{Action: routeForward, To: in.Hint, Because: in.Unable}
			}
			if in.Hops < maxHops && in.HasAlt && in.Alt.Addr != "" && in.Alt.Name != in.Self &&
				in.Alt.Name != in.From && in.Alt.Name != in.Unreachable {
				return routeVerdict{Action: routeForward, To: in.Alt, Because: in.Unable}
			}
			return routeVerdict{Action: routeServe}
		}
		if in.Hops > 0 {
			return routeVerdict{Action: routeServe}
		}
		if hint {
			return routeVerdict{Action: routeForward, To: in.Hint}
		}
		if in.Preferred.Name == in.Unreachable && in.Unreachable != "" {
			return routeVerdict{Action: routeServe}
		}
		if !in.HasPreferred ||
			in.Preferred.Name == in.Self || in.Preferred.Addr == "" {
			return routeVerdict{Action: routeServe}
		}
		return routeVerdict{Action: routeForward, To: in.Preferred}
	}
	if !in.Fleet || in.Hops >= maxHops || in.Holder.Name == in.Self ||
		in.Holder.Name == in.From || in.Holder.Addr == "" {
		return routeVerdict{Action: routeRefuse}
	}
	return routeVerdict{Action: routeForward, To: in.Holder}
}

// routeInput gathers decideRoute's inputs for a request for cell name.
func (d *Daemon) routeInput(r *http.Request, name string) routeIn {
	in := routeIn{Fleet: d.cfg.FleetSecret != "", Self: d.cfg.Node}
	if p, ok := peerOf(r.Context()); ok {
		in.Hops, in.From = p.hops, p.from
	}
	if !in.Fleet {
		return in
	}
	if in.Held = d.held(name) != nil; in.Held {
		return in
	}
	switch {
	case d.ho.draining.Load():
		in.Unable = "draining"
	case d.fencedNow():
		in.Unable = "fenced"
	}
	members := d.routeMembers()
	if in.Unable != "" {
		in.Alt, in.HasAlt = preferred(name, slices.DeleteFunc(slices.Clone(members), func(m member) bool {
			return m.Name == in.Self || m.Name == in.From
		}))
	}
	if in.Hops == 0 {
		in.Preferred, in.HasPreferred = preferred(name, members)
		if h, ok := d.hints.get(name, time.Now()); ok {
			// Only a live member is worth a hop; its address from the view.
			for _, m := range members {
				if m.Name == h {
					in.Hint = m
				}
			}
		}
	}
	return in
}

// route sends a request for a cell this node neither holds nor is placed
// to hold to the node that is, and relays its answer; it reports whether
// it answered. body is the request's body (already read whole). A request
// it does not answer is served here, which claims the cell if it is free.
func (d *Daemon) route(w http.ResponseWriter, r *http.Request, body []byte) bool {
	name := r.PathValue("cell")
	if owner.ValidateName("cell", name) != nil {
		return false // refused here, with the name's own error
	}
	if d.moveInFlight(name) {
		// This node is handing the cell off: the request waits here for
		// the push (acquire's movedAway) and then follows the cell, rather
		// than going by a hint or placement to a node that has not been
		// told yet (which would send it back here).
		return false
	}
	in := d.routeInput(r, name)
	for {
		v := decideRoute(in)
		if v.Action != routeForward {
			return false
		}
		if v.Because != "" {
			d.m.forwardsUnable.WithLabelValues(v.Because).Inc()
			d.unable.add(v.Because)
		}
		err := d.tryForward(w, r, v.To, body, true)
		if err == nil {
			return true
		}
		if errors.Is(err, errMovedHere) {
			return false // the cell was handed to this node: served here
		}
		if in.Unreachable != "" || r.Context().Err() != nil {
			d.forwardFailed(w, r, v.To, false, false, err)
			return true
		}
		// Nothing was sent (the peer's port refused the dial: it stopped
		// or is restarting, its lease not yet seen gone): the next route
		// over the members but that one, once; or this node serves it.
		in.Unreachable = v.To.Name
		d.forwardFailedSilently(r, v.To)
		in.Alt, in.HasAlt = preferred(name, slices.DeleteFunc(d.routeMembers(), func(m member) bool {
			return m.Name == in.Self || m.Name == in.From || m.Name == v.To.Name
		}))
		if in.Unable == "" && in.Hops == 0 {
			in.Preferred, in.HasPreferred = in.Alt, in.HasAlt
			if !in.HasAlt {
				in.Preferred, in.HasPreferred = member{Name: in.Self}, true // serve here
			}
		}
	}
}

// reroute forwards a request whose claim here was refused because a live
// node holds the cell (err names it: DEED-E020 with the holder's address,
// or a handoff's "moved to") to that node, within the hop bound, and
// reports whether it answered. Otherwise the caller answers err.
func (d *Daemon) reroute(w http.ResponseWriter, r *http.Request, body []byte, err error) bool {
	holder, ok := holderOf(err)
	if !ok {
		return false
	}
	// The holder's address as its verified lease advertises it: one
	// that is not a verified member is never sent the request (the
	// refusal is the answer, naming it).
	if holder, ok = d.trustedPeer(holder.Name); !ok && d.cfg.FleetSecret != "" {
		return false
	}
	in := d.routeInput(r, r.PathValue("cell"))
	in.Holder = holder
	v := decideRoute(in)
	if v.Action != routeForward {
		return false
	}
	d.forward(w, r, v.To, body)
	return true
}

// unableCounts count the requests forwarded because this node could not
// serve them (routeVerdict.Because), for the status page.
type unableCounts struct{ fenced, draining atomic.Uint64 }

func (u *unableCounts) add(why string) {
	switch why {
	case "fenced":
		u.fenced.Add(1)
	case "draining":
		u.draining.Add(1)
	}
}

// holderHints remembers, per cell, the peer that served this node's last
// forward of it, for at most one TTL, so that a cell held by a node that
// is not its preferred one is not claimed here (one refused claim, a store
// read) for every request routed through this node. A hint is only a
// first guess: the hinted node routes a request for a cell it no longer
// holds like any other (one more hop at most), and a hint is dropped when
// its node could not be reached. Bounded: at maxHints, it starts afresh.
type holderHints struct {
	mu sync.Mutex
	m  map[string]holderHint
}

type holderHint struct {
	node  string
	until time.Time
}

const maxHints = 1 << 16

func (h *holderHints) get(cell string, now time.Time) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.m[cell]
	if !ok || now.After(e.until) {
		return "", false
	}
	return e.node, true
}

func (h *holderHints) set(cell, node string, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxHints {
		h.m = map[string]holderHint{}
	}
	h.m[strings.Clone(cell)] = holderHint{node: node, until: until}
}

func (h *holderHints) drop(cell string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, cell)
}

// holderOf is the node err says serves the cell instead of this one: the
// live holder of a refused claim, or the node a cell was handed to (an
// error with a MovedTo method, which a handoff returns).
func holderOf(err error) (member, bool) {
	var held *owner.HeldError
	if errors.As(err, &held) {
		return member{Name: held.Owner, Addr: held.Addr}, held.Owner != ""
	}
	var moved interface{ MovedTo() (node, addr string) }
	if errors.As(err, &moved) {
		n, a := moved.MovedTo()
		return member{Name: n, Addr: a}, n != ""
	}
	return member{}, false
}

// readRecords reads a cell's records for readCell. A cell held here is read
// from its log, and read again where the cell is now if a retire (release,
// move) closed the log under the read (with a fleet, or without a
// barrier). A plain read of a cell not held here is served from the bucket
// by this node: the same committed records the owner would return, at no
// hop, and even while the owner is unreachable. A barrier read must run on
// the holder, so, with a fleet, it is routed as an append is (to the
// holder, or to the preferred node, which claims a free cell): as
// linearizable through any node as on the owner. Without a fleet it is
// DEED-E024 as before. done says the answer was already written
// (forwarded).
func (d *Daemon) readRecords(w http.ResponseWriter, r *http.Request, name string, after replication.Pos, limit int, barrier bool) (recs []replication.Record, done bool, err error) {
	ctx, fleet := r.Context(), d.cfg.FleetSecret != ""
	for range maxRetiredRetries {
		c := d.held(name)
		if c == nil && barrier && fleet {
			if d.route(w, r, nil) {
				return nil, true, nil
			}
			if c, err = d.acquire(ctx, name, false); err != nil {
				if d.reroute(w, r, nil, err) {
					return nil, true, nil
				}
				return nil, false, err
			}
		}
		if c != nil || !barrier {
			// Below the trim point nothing is served; a read that met
			// files deleted under it asks whether a newer trim explains it.
			if err := d.checkTrim(ctx, name, c, after, false); err != nil {
				return nil, false, err
			}
		}
		switch {
		case c != nil:
			c.c.begin()
			recs, err = c.log.Read(ctx, after, limit, barrier)
			c.c.end()
			if errors.Is(err, replication.ErrCompacted) {
				if terr := d.checkTrim(ctx, name, c, after, true); terr != nil {
					return nil, false, terr
				}
			}
			// Read again where the cell is now; but a barrier read without
			// a fleet could only be refused by this node (DEED-E024), so it
			// answers "retry" (DEED-E011) as before.
			if (fleet || !barrier) && c.retiredUnder(err) {
				continue
			}
			return recs, false, closedUnder(c, err)
		case barrier:
			return nil, false, d.notHeldForBarrier(ctx, name)
		default:
			recs, err = replication.Read(ctx, d.b, name, after, limit)
			if errors.Is(err, replication.ErrCompacted) {
				if terr := d.checkTrim(ctx, name, nil, after, true); terr != nil {
					return nil, false, terr
				}
			}
			return recs, false, err
		}
	}
	return nil, false, errcode.Errorf(errcode.CodeUnavailable, "read %s: the cell was retired under the read %d times; retry", name, maxRetiredRetries)
}

// NewPeerClient is an HTTP client for the requests between the daemons of a
// fleet: connections kept and reused (a forward costs no handshake), a
// bounded dial and a bounded request, no proxy from the environment, no
// redirects followed. tlsConfig (nil: the system's roots) is the trust for
// peers that serve HTTPS.
func NewPeerClient(tlsConfig *tls.Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = (&net.Dialer{Timeout: peerDialTimeout, KeepAlive: 30 * time.Second}).DialContext
	tr.MaxIdleConns = 1024
	tr.MaxIdleConnsPerHost = 256
	tr.TLSClientConfig = tlsConfig
	return &http.Client{
		Transport:     tr,
		Timeout:       peerTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// defaultPeerClient is the peer client of a daemon whose Config has none.
var defaultPeerClient = NewPeerClient(nil)

func (d *Daemon) peerClient() *http.Client {
	if d.cfg.PeerClient != nil {
		return d.cfg.PeerClient
	}
	return defaultPeerClient
}

// forward sends r (with body) to the node to, authenticated by the fleet
// secret and counting one hop more, and relays its answer: status,
// headers (its Deed-Node among them) and body. What it answers when that
// fails follows what may have happened: nothing sent (dial refused, no
// route, the peer refused this node's secret) is DEED-E013, not applied;
// sent without an answer is, for an append, DEED-E012 (applied unknown:
// the owner may have written it), for a read DEED-E013.
func (d *Daemon) forward(w http.ResponseWriter, r *http.Request, to member, body []byte) {
	if err := d.tryForward(w, r, to, body, false); err != nil {
		d.forwardFailed(w, r, to, false, false, err)
	}
}

// errMovedHere is tryForward's answer when the peer refused the request
// because it just handed the cell to this node (headerMovedTo).
var errMovedHere = errors.New("the cell was handed to this node")

// tryForward is forward but for a request that could not be sent at all
// (nothing reached the peer, nothing was written to w): it returns why,
// and the caller may try another node. With mayServe, a refusal naming
// this node as the cell's new home is not relayed: errMovedHere.
func (d *Daemon) tryForward(w http.ResponseWriter, r *http.Request, to member, body []byte, mayServe bool) error {
	hops := 1
	if p, ok := peerOf(r.Context()); ok {
		hops = p.hops + 1
	}
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	path := r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	var sent atomic.Bool
	ctx := httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				sent.Store(true)
			}
		},
	})
	if m, ok := d.trustedPeer(to.Name); !ok || m.Addr != to.Addr {
		// Only ever to a verified member at the address its lease
		// advertises; routing chose from those, so this is a view that
		// changed under it.
		return errcode.Errorf(errcode.CodePeer, "node %s at %s is not a verified member of this fleet now", to.Name, to.Addr)
	}
	pr, err := d.newPeerRequest(ctx, to.Name, to.Addr, r.Method, path, body)
	if err != nil {
		return err
	}
	pr.req.Header.Set(headerHops, strconv.Itoa(hops))
	if ct := r.Header.Get("Content-Type"); ct != "" {
		pr.req.Header.Set("Content-Type", ct)
	}
	if k := r.Header.Get(HeaderIdempotencyKey); k != "" {
		pr.req.Header.Set(HeaderIdempotencyKey, k) // the holder answers a retry with the first outcome
	}
	resp, nonce, err := d.sendPeer(pr)
	if err != nil {
		if !sent.Load() {
			return err
		}
		d.forwardFailed(w, r, to, write, true, err)
		return nil
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		d.forwardFailed(w, r, to, write, true, err)
		return nil
	}
	if !answerVerified(d.peers.key, nonce, resp, raw) {
		// Not proved by a holder of the fleet secret: not relayed, and
		// what happened there is not known. A peer's guard refusing the
		// proof (401) cannot sign either, so it lands here too: for an
		// append that is "unknown" rather than a "no" this node cannot
		// vouch for.
		d.m.forwards.WithLabelValues("unverified").Inc()
		d.forwardFailed(w, r, to, write, true, errcode.Errorf(errcode.CodePeer, "its answer (%s) carries no valid peer proof: not believed", resp.Status))
		return nil
	}
	if resp.StatusCode == http.StatusUnauthorized {
		// A member's proved 401: its guard refused the proof before any
		// handler ran (clock skew beyond the window, or a replay).
		d.m.forwards.WithLabelValues("refused").Inc()
		writeError(w, errcode.Errorf(errcode.CodePeer, "cell %s: node %s at %s refused this node's request as a peer's (401); not applied, retry", r.PathValue("cell"), to.Name, to.Addr))
		return nil
	}
	if mayServe && resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(headerStarting) != "" && appliedNo(raw) {
		// Proved, and applied "no" in its proved body: the header (not
		// covered by the proof) can only make a request that was not
		// applied go elsewhere.
		return errcode.Errorf(errcode.CodeUnavailable, "node %s at %s is starting", to.Name, to.Addr)
	}
	d.m.forwards.WithLabelValues("ok").Inc()
	if mayServe && resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(headerMovedTo) == d.cfg.Node {
		d.hints.drop(r.PathValue("cell"))
		return errMovedHere
	}
	if resp.Header.Get(headerNotHeld) != "" {
		d.hints.drop(r.PathValue("cell"))
	} else if served := resp.Header.Get(HeaderNode); resp.StatusCode/100 == 2 && served != "" && served != d.cfg.Node {
		d.hints.set(r.PathValue("cell"), served, time.Now().Add(d.cfg.TTL))
	}
	h := w.Header()
	for k, vs := range resp.Header {
		switch k {
		case "Connection", "Keep-Alive", "Transfer-Encoding", "Content-Length", "Date", headerNotHeld:
			continue
		}
		h[k] = vs
	}
	if resp.Header.Get(HeaderNode) == "" {
		h.Set(HeaderNode, to.Name) // a peer that does not name itself served it all the same
	}
	h.Add(headerForwardedBy, d.cfg.Node)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(raw)
	return nil
}

// appliedNo reports whether an error answer's body says applied "no".
func appliedNo(raw []byte) bool {
	var b struct {
		Applied string `json:"applied"`
	}
	return json.Unmarshal(raw, &b) == nil && b.Applied == "no"
}

// forwardFailedSilently counts a forward that reached nothing, which the
// caller routes once more instead of answering it ("rerouted").
func (d *Daemon) forwardFailedSilently(r *http.Request, to member) {
	d.hints.drop(r.PathValue("cell"))
	d.m.forwards.WithLabelValues("rerouted").Inc()
}

// forwardFailed answers a forward that got no answer: sent says the
// request reached the peer whole (it may have been acted on).
func (d *Daemon) forwardFailed(w http.ResponseWriter, r *http.Request, to member, write, sent bool, err error) {
	cell := r.PathValue("cell")
	d.hints.drop(cell)
	if sent && write {
		d.m.forwards.WithLabelValues("lost").Inc()
		writeError(w, errcode.Errorf(errcode.CodeAmbiguous, "cell %s: forwarded to node %s at %s, whose answer was lost: outcome unknown, read before retrying: %w", cell, to.Name, to.Addr, err))
		return
	}
	what, result := "could not be reached", "unreachable"
	if sent {
		what, result = "did not answer", "lost"
	}
	d.m.forwards.WithLabelValues(result).Inc()
	writeError(w, errcode.Errorf(errcode.CodePeer, "cell %s: node %s at %s, which serves it, %s; not applied, retry: %w", cell, to.Name, to.Addr, what, err))
}

// notHeldForBarrier is the refusal of a barrier read of a cell this node
// does not hold (and cannot forward: no fleet), saying what to do next,
// which depends on whether anybody holds it: one GET of its record, on
// this refusal's path only.
func (d *Daemon) notHeldForBarrier(ctx context.Context, name string) error {
	return d.notHeldFor(ctx, "read "+name+" with barrier", name, "read without barrier, or ask its holder", ", or read without barrier")
}

// notHeldFor is notHeldForBarrier for what (a barrier read, a tail):
// instead is the advice when the holder is unknown, orNot the one added
// when nobody holds the cell.
func (d *Daemon) notHeldFor(ctx context.Context, what, name, instead, orNot string) error {
	rec, exists, err := owner.Inspect(ctx, d.b, name)
	switch {
	case err != nil:
		return errcode.Errorf(errcode.CodeNotHolder, "%s: this node (%s) does not hold the cell (who does is unknown: %v); %s", what, d.cfg.Node, err, instead)
	case !exists || rec.Released():
		return errcode.Errorf(errcode.CodeNotHolder, "%s: nobody holds it: append or claim first (it is served by the cell's holder)%s", what, orNot)
	}
	return errcode.Errorf(errcode.CodeNotHolder, "%s: node %s holds it at epoch %d, not this node (%s): ask it, or give the nodes a fleet secret so that they forward", what, rec.Node, rec.Epoch, d.cfg.Node)
}
