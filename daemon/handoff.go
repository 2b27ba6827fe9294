package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/internal/wait"
	"github.com/deedkit/deed/owner"
)

// Moves: a cell held here whose preferred node is another live node is
// handed off to it (retire, then a push that makes the target claim at
// once); a draining node hands off every cell; `deed move` hands one cell
// off with a pin. docs/fleet.md ("Placement and moves") says what an operator
// sees.

const (
	// DefaultMoveRate is the rebalancer's default bound on hand-offs per
	// second: a node that joins a fleet of 100,000 cells takes its share
	// in minutes, and the store sees at most about 6 requests per move.
	DefaultMoveRate = 50
	// moveConcurrency bounds the hand-offs one node runs at once: a move
	// costs a few round trips, so a handful in flight reach the rate even
	// with a distant store.
	moveConcurrency = 8
	// maxMoved bounds the cells remembered as just moved away (about 100
	// bytes each); forgetting one early costs one forwarding hop via the
	// holder's record, never correctness.
	maxMoved = 65536
)

// Headers of a handoff push (POST /v1/cells/{cell}/handoff, peer only).
const (
	// headerHandoffETag is the ETag of the released record the pusher's
	// retire wrote, and headerHandoffEpoch its epoch: the target claims
	// with one If-Match PUT on it instead of reading first.
	headerHandoffETag  = "Deed-Handoff-ETag"
	headerHandoffEpoch = "Deed-Handoff-Epoch"
	// headerHandoffEnd is where that epoch's log sealed its chain
	// ("txid=T pos=P", the End its release recorded): the target's log
	// reads that one seal instead of listing and walking the log. It is a
	// hint like the release record's own end, checked the same way (the
	// seal is read; anything else there and the log walks), so a stale or
	// wrong value costs the walk, never a record.
	headerHandoffEnd = "Deed-Handoff-End"
)

// formatHandoffEnd and parseHandoffEnd are headerHandoffEnd's value.
func formatHandoffEnd(e owner.End) string {
	return fmt.Sprintf("txid=%d pos=%d", e.TxID, e.Pos)
}

func parseHandoffEnd(v string) (owner.End, error) {
	var e owner.End
	// The round trip through formatHandoffEnd refuses anything but the
	// canonical form (signs, leading zeros, trailing text).
	if _, err := fmt.Sscanf(v, "txid=%d pos=%d", &e.TxID, &e.Pos); err != nil || e.TxID == 0 || e.Pos == 0 || v != formatHandoffEnd(e) {
		return owner.End{}, errcode.Errorf(errcode.CodeBadRequest, "handoff: %s %q is not \"txid=T pos=P\" with T, P > 0; nothing was claimed (the pushing node runs another version: upgrade every node of the fleet together)", headerHandoffEnd, v)
	}
	return e, nil
}

// handoffs is the daemon's state for moves: cells just handed off (so that
// requests that waited on them here are forwarded, not re-claimed), cells
// pinned here by `deed move`, and the drain switch.
type handoffs struct {
	mu     sync.Mutex
	moved  map[string]movedTo
	pinned map[string]pin

	draining atomic.Bool
	kick     chan struct{} // wakes the rebalancer (a drain began)

	// What the rebalancer must look at (under mu): placement is
	// recomputed for every held cell only when the member set changed
	// since the last round that finished (placedKey), or that round left
	// work undone (dirty); otherwise only for the cells claimed here or
	// unpinned since (fresh). A steady fleet costs no placement work.
	placedKey *string
	dirty     bool
	fresh     map[string]struct{}
}

// maxFresh bounds handoffs.fresh; beyond it the next round looks at every
// held cell instead.
const maxFresh = 1 << 16

// noteFresh marks cell for the rebalancer's next look: claimed here, or
// its pin ended. d.ho.mu is held.
func (h *handoffs) noteFreshLocked(cell string) {
	if h.dirty {
		return
	}
	if h.fresh == nil {
		h.fresh = map[string]struct{}{}
	}
	if len(h.fresh) >= maxFresh {
		h.dirty, h.fresh = true, nil
		return
	}
	h.fresh[cell] = struct{}{}
}

// pin keeps a cell here against the rebalancer while lease lives: for
// good (a `deed move`), or until until (a cell just handed in, which is
// not handed on again before every view has caught up with the move).
type pin struct {
	lease *owner.Lease
	until time.Time // zero: while the lease lives
}

// movedTo is where a cell went and when. pushed is closed when the push
// to the target has been answered: until then a request that waited on
// the cell here waits on, so that it reaches the target after the target
// has claimed the cell (and forgotten any move of its own the other way),
// never before.
type movedTo struct {
	to     member
	at     time.Time
	pushed chan struct{}
}

// MovedError answers a request for a cell this node does not take: it has
// just handed the cell off to another node, or it drains and the cell is
// free. Nothing was written; the request belongs at the node MovedTo names
// (a router forwards it there). DEED-E011, applied "no".
type MovedError struct {
	Cell, Node, Addr string
	// Draining is set when the reason is this node's drain, not a move.
	Draining bool
}

func (e *MovedError) Error() string {
	why := "was just moved"
	if e.Draining {
		why = "is not taken by this draining node; it goes"
	}
	return fmt.Sprintf("cell %s %s to node %s (%s): send the request there; nothing was written here", e.Cell, why, e.Node, e.Addr)
}

// ErrorCode makes a MovedError a DEED-E011: retry (there), not applied.
func (e *MovedError) ErrorCode() errcode.Code { return errcode.CodeUnavailable }

// MovedTo names the node a request for the cell should go to.
func (e *MovedError) MovedTo() (node, addr string) { return e.Node, e.Addr }

// movedAway returns a *MovedError when a claim of cell here would undo a
// move: the cell was handed off within the last TTL to a node not since
// seen dead (one this node has not yet seen at all counts as alive: the
// target of a push is alive by the pusher's word), or this node drains
// and another member is preferred for it. A request that comes while the
// push is under way waits for its answer first. nil means the claim may go
// ahead.
func (d *Daemon) movedAway(ctx context.Context, cell string) error {
	d.ho.mu.Lock()
	e, ok := d.ho.moved[cell]
	d.ho.mu.Unlock()
	if ok {
		select {
		case <-e.pushed:
		case <-ctx.Done():
			return errcode.Errorf(errcode.CodeUnavailable, "cell %s: gave up waiting for its move to node %s: %v; nothing was written", cell, e.to.Name, ctx.Err())
		}
		d.ho.mu.Lock()
		e, ok = d.ho.moved[cell] // gone if the push failed: the cell is free
		if ok && time.Since(e.at) >= d.cfg.TTL {
			delete(d.ho.moved, cell)
			ok = false
		}
		d.ho.mu.Unlock()
	}
	draining := d.ho.draining.Load()
	if !ok && !draining {
		return nil
	}
	if ok && !d.seenDead(e.to.Name) {
		return &MovedError{Cell: cell, Node: e.to.Name, Addr: e.to.Addr}
	}
	if draining {
		if m, ok := preferred(cell, d.others()); ok {
			return &MovedError{Cell: cell, Node: m.Name, Addr: m.Addr, Draining: true}
		}
	}
	// The target is gone, or no other node is there to take it: claiming
	// here is better than refusing.
	return nil
}

// seenDead reports whether this node's view has node, and judges it dead
// (or cleanly stopped) or draining.
func (d *Daemon) seenDead(node string) bool {
	d.mu.Lock()
	n := d.node
	d.mu.Unlock()
	if n == nil {
		return false
	}
	for _, v := range n.Observer().View() {
		if v.Node == node {
			return !v.Alive || v.Released || v.Draining
		}
	}
	return false
}

// moveInFlight reports whether a handoff of cell from this node is under
// way (released or being released here, the push not answered yet).
func (d *Daemon) moveInFlight(cell string) bool {
	d.ho.mu.Lock()
	defer d.ho.mu.Unlock()
	e, ok := d.ho.moved[cell]
	return ok && !e.finished()
}

// others are the placement members but this node.
func (d *Daemon) others() []member {
	ms := d.members()
	return slices.DeleteFunc(ms, func(m member) bool { return m.Name == d.cfg.Node })
}

// noteMoved remembers that cell is being handed to to; false when a move
// of cell is already under way here.
func (d *Daemon) noteMoved(cell string, to member) bool {
	d.ho.mu.Lock()
	defer d.ho.mu.Unlock()
	if d.ho.moved == nil {
		d.ho.moved = map[string]movedTo{}
	}
	if e, ok := d.ho.moved[cell]; ok && !e.finished() {
		return false
	}
	if _, ok := d.ho.moved[cell]; !ok && len(d.ho.moved) >= maxMoved {
		d.expireMovedLocked()
		for k, e := range d.ho.moved {
			if len(d.ho.moved) < maxMoved {
				break
			}
			e.finish()
			delete(d.ho.moved, k)
		}
	}
	d.ho.moved[cell] = movedTo{to: to, at: time.Now(), pushed: make(chan struct{})}
	return true
}

// finished reports whether e's push has ended; d.ho.mu is held.
func (e movedTo) finished() bool {
	select {
	case <-e.pushed:
		return true
	default:
		return false
	}
}

// finish ends e's push, once; d.ho.mu is held.
func (e movedTo) finish() {
	if !e.finished() {
		close(e.pushed)
	}
}

// pushedMoved records the push's end: requests waiting in movedAway go
// on, to the target (ok) or to claim the free cell (not ok).
func (d *Daemon) pushedMoved(cell string, ok bool) {
	d.ho.mu.Lock()
	defer d.ho.mu.Unlock()
	e, found := d.ho.moved[cell]
	if !found {
		return
	}
	if !ok {
		delete(d.ho.moved, cell)
	}
	e.finish()
}

// forgetMoved undoes noteMoved: the retire failed and the cell stays
// here, or the cell is handed back here.
func (d *Daemon) forgetMoved(cell string) {
	d.ho.mu.Lock()
	if e, ok := d.ho.moved[cell]; ok {
		delete(d.ho.moved, cell)
		e.finish()
	}
	d.ho.mu.Unlock()
}

// expireMovedLocked drops moves older than a TTL and pins whose lease
// ended; d.ho.mu is held.
func (d *Daemon) expireMovedLocked() {
	now := time.Now()
	for k, e := range d.ho.moved {
		if !e.finished() {
			continue // still in flight: its handOff ends it
		}
		if now.Sub(e.at) >= d.cfg.TTL {
			delete(d.ho.moved, k)
		}
	}
	for k, p := range d.ho.pinned {
		if p.lease != nil && (p.lease.Err() != nil || (!p.until.IsZero() && !now.Before(p.until))) {
			delete(d.ho.pinned, k)
			d.ho.noteFreshLocked(k) // it may belong elsewhere now
		}
	}
}

// pinnedHere reports whether h's lease is pinned here by a move.
func (d *Daemon) pinnedHere(h *holding) bool {
	d.ho.mu.Lock()
	defer d.ho.mu.Unlock()
	p, ok := d.ho.pinned[h.name]
	return ok && (p.lease == nil || p.lease == h.lease) && (p.until.IsZero() || time.Now().Before(p.until))
}

// handOff moves cell, held here, to the node to: requests for it wait while
// retire finishes the writes in flight, seals the log and releases the
// record; then to is told to claim it at once, with the released record's
// ETag, so its claim is one conditional PUT and its log opens on a sealed
// chain without a walk. pinned makes to keep the cell against its own
// rebalancer (`deed move`).
//
// Requests that waited here meanwhile get a *MovedError (forwarded to to).
// If the push fails the cell is simply free: released, sealed, and claimed
// by whichever node the next request for it reaches first, which routing
// makes its preferred node. The error says so; nothing is lost either way.
func (d *Daemon) handOff(ctx context.Context, cell string, to member, pinned bool) (client.Claim, error) {
	if !d.noteMoved(cell, to) {
		return client.Claim{}, errcode.Errorf(errcode.CodeUnavailable, "move %s to %s: a move of this cell is already under way", cell, to.Name)
	}
	if _, err := d.retire(ctx, cell, "move"); err != nil {
		d.forgetMoved(cell)
		return client.Claim{}, fmt.Errorf("move %s to %s: %w", cell, to.Name, err)
	}
	d.m.moves.WithLabelValues("out").Inc()
	var hint owner.Hint
	if n, err := d.currentNode(); err == nil {
		hint, _ = n.ReleasedHint(cell)
	}
	detail := "out"
	if pinned {
		detail = "out, pinned"
	}
	got, err := d.pushHandoff(ctx, cell, to, pinned, hint)
	d.pushedMoved(cell, err == nil)
	if err != nil {
		d.m.movePushes.WithLabelValues("error").Inc()
		d.events.add(Event{Kind: "move", Cell: cell, Node: to.Name, Detail: detail + "; push failed, cell left free"})
		d.log.Warn("cell released for a move, but the target did not claim it; it is free", "cell", cell, "to", to.Name, "err", err)
		return got, errcode.Errorf(errcode.CodeUnavailable, "move %s: released and sealed here, but node %s did not claim it (%v); the cell is free, and the next request for it claims it", cell, to.Name, err)
	}
	d.m.movePushes.WithLabelValues("ok").Inc()
	d.events.add(Event{Kind: "move", Cell: cell, Node: to.Name, Detail: detail})
	d.log.Info("cell moved", "cell", cell, "to", to.Name, "epoch", got.Epoch, "pinned", pinned)
	return got, nil
}

// pushHandoff tells to to claim cell now (a peer request) and returns its
// claim.
func (d *Daemon) pushHandoff(ctx context.Context, cell string, to member, pinned bool, hint owner.Hint) (client.Claim, error) {
	var got client.Claim
	if m, ok := d.trustedPeer(to.Name); !ok || m.Addr != to.Addr {
		return got, errcode.Errorf(errcode.CodeUnavailable, "handoff push to %s: node %s at %s is not a verified member of this fleet now; nothing sent", to.Addr, to.Name, to.Addr)
	}
	// Bounded by a TTL: a push that takes longer is better given up, as
	// the cell is free anyway and its next request claims it.
	ctx, cancel := context.WithTimeout(ctx, d.cfg.TTL)
	defer cancel()
	path := "/v1/cells/" + url.PathEscape(cell) + "/handoff"
	if pinned {
		path += "?pin=true"
	}
	pr, err := d.newPeerRequest(ctx, to.Name, to.Addr, http.MethodPost, path, nil)
	if err != nil {
		return got, err
	}
	if hint.ReleasedETag != "" {
		setHintHeaders(pr.req.Header, hint)
	}
	resp, nonce, err := d.sendPeer(pr)
	if err != nil {
		return got, errcode.Errorf(errcode.CodeUnavailable, "handoff push to %s: %v", to.Addr, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if !answerVerified(d.peers.key, nonce, resp, raw) {
		// Not the member's word: whether it claimed the cell is unknown,
		// and the cell, released here, is claimed by its next request.
		return got, fmt.Errorf("%s answered %s without a valid peer proof: not believed", to.Name, resp.Status)
	}
	if resp.StatusCode/100 != 2 {
		var e client.ErrorBody
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			return got, fmt.Errorf("%s answered %s: %s", to.Name, resp.Status, e.Error)
		}
		return got, fmt.Errorf("%s answered %s", to.Name, resp.Status)
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		return got, fmt.Errorf("%s answered %s with something that is not deed's JSON", to.Name, resp.Status)
	}
	return got, nil
}

// takeHandoff serves POST /v1/cells/{cell}/handoff, a peer's push after it
// released cell for this node: claim it now (with the peer's released
// ETag, one PUT), pinned when ?pin=true. Peers only (the fleet secret).
func (d *Daemon) takeHandoff(w http.ResponseWriter, r *http.Request) {
	// guard has checked the peer proof and marked the
	// request as a peer's; anything else is a client's, which may not push.
	peer, ok := peerOf(r.Context())
	if !ok {
		writeError(w, errcode.Errorf(errcode.CodeUnauthorized, "handoff: only a peer of this fleet (with the fleet secret) may push a cell"))
		return
	}
	name := r.PathValue("cell")
	if err := owner.ValidateName("cell", name); err != nil {
		writeError(w, err)
		return
	}
	pin, err := boolParam(r, "pin")
	if err != nil {
		writeError(w, err)
		return
	}
	from := peer.from
	hint, err := hintHeaders(r.Header)
	if err != nil {
		writeError(w, err)
		return
	}
	if hint.ReleasedETag != "" && hint.Epoch != 0 {
		if n, nerr := d.currentNode(); nerr == nil {
			// The end rides with the ETag: the claim uses it only when
			// its If-Match on that ETag succeeds at epoch+1 (so no claim
			// came between), and the log reads the seal it names.
			n.NoteHint(name, hint)
		}
	}
	h, err := d.claimHere(r.Context(), name, pin)
	if err != nil {
		writeError(w, err)
		return
	}
	d.m.moves.WithLabelValues("in").Inc()
	d.events.add(Event{Kind: "move", Cell: name, Node: from, Detail: "in"})
	writeJSONStatus(w, http.StatusOK, client.Claim{Cell: h.name, Node: d.cfg.Node, Epoch: h.lease.Epoch()})
}

// claimHere claims cell for a move to this node (pinned: against this
// node's rebalancer while the lease lives). A move back here undoes this node's
// own earlier "moved away" note. A draining node refuses (DEED-E011).
func (d *Daemon) claimHere(ctx context.Context, cell string, pinned bool) (*holding, error) {
	if d.ho.draining.Load() {
		return nil, errcode.Errorf(errcode.CodeUnavailable, "node %s is draining: it takes no cells", d.cfg.Node)
	}
	d.forgetMoved(cell)
	// The pin is in place before the claim, so that no rebalancer round
	// sees the cell held and unpinned in between (lease nil: pending).
	d.setPin(cell, pin{})
	h, err := d.acquire(ctx, cell, false)
	if err != nil {
		d.ho.mu.Lock()
		if p, ok := d.ho.pinned[cell]; ok && p.lease == nil {
			delete(d.ho.pinned, cell)
		}
		d.ho.mu.Unlock()
		return nil, err
	}
	// Not pinned, a cell handed in still stays a TTL: the pusher's view of
	// the fleet may be ahead of this node's (a peer that began to drain,
	// or joined, and whose lease this node has not read yet), and sending
	// it back at once would undo the move, or fail and leave it free.
	p := pin{lease: h.lease}
	if !pinned {
		p.until = time.Now().Add(d.cfg.TTL)
	}
	d.setPin(cell, p)
	return h, nil
}

func (d *Daemon) setPin(cell string, p pin) {
	d.ho.mu.Lock()
	defer d.ho.mu.Unlock()
	if d.ho.pinned == nil {
		d.ho.pinned = map[string]pin{}
	}
	d.ho.pinned[cell] = p
}

// moveCell serves POST /v1/cells/{cell}/move?to=NODE: hand the cell, held
// here, to NODE with a pin. A cell not held anywhere is claimed on NODE
// directly; one held by another node is DEED-E024 (ask its holder).
func (d *Daemon) moveCell(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("cell")
	if err := owner.ValidateName("cell", name); err != nil {
		writeError(w, err)
		return
	}
	toName := r.URL.Query().Get("to")
	if err := owner.ValidateName("node", toName); err != nil {
		writeError(w, errcode.Wrap(err, "move %s: ?to", name))
		return
	}
	var to member
	ms := d.members()
	if i := slices.IndexFunc(ms, func(m member) bool { return m.Name == toName }); i >= 0 {
		to = ms[i]
	} else if toName != d.cfg.Node {
		writeError(w, errcode.Errorf(errcode.CodeBadRequest, "move %s: node %s is not a live, non-draining node of this fleet (see deed nodes); nothing moved", name, toName))
		return
	}
	ctx := r.Context()
	out := client.Moved{Cell: name, To: toName}
	var rec owner.Record
	if d.held(name) == nil {
		// A move places a cell that exists; one never claimed is most
		// likely a typo, which a move would create (one GET: moves are rare).
		var exists bool
		var err error
		if rec, exists, err = owner.Inspect(ctx, d.b, name); err != nil {
			writeError(w, errcode.Wrap(err, "move %s", name))
			return
		}
		if !exists {
			writeError(w, errcode.Errorf(errcode.CodeBadRequest, "move %s: no such cell: it was never claimed (check the name; append to it or claim it first); nothing moved", name))
			return
		}
	}
	switch {
	case toName == d.cfg.Node:
		h, err := d.claimHere(ctx, name, true)
		if err != nil {
			writeError(w, errcode.Wrap(err, "move %s", name))
			return
		}
		out.Epoch = h.lease.Epoch()
	case d.held(name) != nil:
		out.From = d.cfg.Node
		got, err := d.handOff(ctx, name, to, true)
		if err != nil {
			writeError(w, err)
			return
		}
		out.Epoch = got.Epoch
	default:
		if !rec.Released() {
			if n, err := d.currentNode(); err == nil && n.Observer().Alive(rec.Node) {
				writeError(w, errcode.Errorf(errcode.CodeNotHolder, "move %s: held by node %s, not by this node (%s): ask its holder", name, rec.Node, d.cfg.Node))
				return
			}
		}
		// Not held anywhere (free, or its holder is dead): NODE claims it.
		got, err := d.pushHandoff(ctx, name, to, true, owner.Hint{})
		if err != nil {
			writeError(w, errcode.Errorf(errcode.CodeUnavailable, "move %s: node %s did not claim it: %v", name, toName, err))
			return
		}
		out.Epoch = got.Epoch
	}
	out.Moved = true
	writeJSONStatus(w, http.StatusOK, out)
}

// drainNode serves POST (on) and DELETE (off) /v1/node/drain: a draining
// node hands off every cell to its preferred node among the others and
// claims no free cell (a request for one gets a *MovedError); peers leave
// it out of placement from its next renewal on (within TTL/3).
func (d *Daemon) drainNode(on bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		d.setDraining(on)
		writeJSONStatus(w, http.StatusOK, client.NodeState{Node: d.cfg.Node, Draining: on, Cells: d.countLive()})
	}
}

// setDraining turns the drain on or off (drainNode, Leave).
func (d *Daemon) setDraining(on bool) {
	if d.ho.draining.Swap(on) != on {
		detail := "off"
		if on {
			detail = "on"
		}
		d.events.add(Event{Kind: "drain", Node: d.cfg.Node, Detail: detail})
		d.log.Info("drain", "on", on)
	}
	if n, err := d.currentNode(); err == nil {
		n.SetDraining(on)
	}
	d.kickRebalancer()
}

// Leave makes a planned stop invisible to clients, as `deed drain` does:
// with the fleet on, the node says draining in its lease, hands every cell
// off to its preferred peer, and waits until its peers can have stopped
// routing to it — its next renewal carries "draining" (within TTL/3) and
// their next LIST sees it (within TTL/3 more) — while it still serves and
// forwards. Then Close (after the API stops taking connections) releases
// what is left. Bounded by ctx; without a fleet or a live peer it returns
// at once (what was not handed off is released by Close).
func (d *Daemon) Leave(ctx context.Context) error {
	if d.cfg.FleetSecret == "" || !d.ready() || len(d.others()) == 0 {
		return nil // no peer routes to this node, none could take a cell
	}
	start := time.Now()
	d.setDraining(true)
	seen := start.Add(2 * d.cfg.TTL / 3)
	for {
		// No peer to take the cells: nothing to wait for but the lease.
		handed := d.countLive() == 0 || len(d.others()) == 0
		if handed && !d.movesInFlight() && !time.Now().Before(seen) {
			return nil
		}
		if err := wait.Sleep(ctx, 50*time.Millisecond); err != nil {
			return errcode.Errorf(errcode.CodeUnavailable, "leave: %d cells not handed off within the bound: %w", d.countLive(), err)
		}
	}
}

// movesInFlight reports whether any handoff from this node is under way.
func (d *Daemon) movesInFlight() bool {
	d.ho.mu.Lock()
	defer d.ho.mu.Unlock()
	for _, e := range d.ho.moved {
		if !e.finished() {
			return true
		}
	}
	return false
}

// countLive is the number of cells held here with a live lease.
func (d *Daemon) countLive() int { return len(d.heldNow()) }

// heldNow is every cell held here with a live lease and no retire begun.
func (d *Daemon) heldNow() []*holding {
	var out []*holding
	for _, c := range d.cellEntries() {
		c.mu.Lock()
		if c.lease != nil && c.lease.Err() == nil && !c.releasing {
			out = append(out, c.holding())
		}
		c.mu.Unlock()
	}
	return out
}

func (d *Daemon) kickRebalancer() {
	select {
	case d.ho.kick <- struct{}{}:
	default:
	}
}

// startRebalancer runs the rebalancer until ctx ends (Close).
func (d *Daemon) startRebalancer(ctx context.Context) {
	d.ho.kick = make(chan struct{}, 1)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.rebalance(ctx)
	}()
}

// rebalance looks every TTL/3 (the pace at which the node's view of its
// peers is refreshed), or at once when a drain begins, for cells held here
// that belong elsewhere, and hands them off at most moveRate per second.
//
// The rule against moving on a shaky view: cells move only when the member
// set (names, addresses, weights) is the same as at the previous look, a
// TTL/3 earlier, and includes this node. One late LIST, a node that
// flickers, or this node's own lease not yet seen cannot start a wave of
// moves; a real join or death is acted on one look later. The set is
// looked at again before each move, and a change ends the round.
//
// Only with the fleet on: without forwarding, a moved cell's next request
// would come back here and claim it again. A drain hands off every cell
// (pinned ones too) to its preferred node among the others, and does not
// wait for a stable view: the draining node's own set changes by design.
func (d *Daemon) rebalance(ctx context.Context) {
	var view steadiness
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.ho.kick:
		case <-time.After(d.cfg.TTL / 3):
		}
		n, err := d.currentNode()
		if err != nil {
			view = steadiness{}
			continue
		}
		draining := d.ho.draining.Load()
		n.SetDraining(draining) // again on a new incarnation after a fence
		d.ho.mu.Lock()
		d.expireMovedLocked()
		d.ho.mu.Unlock()
		ms := d.members()
		key := memberKey(ms)
		stable := view.steady(ms)
		rate := d.cfg.MoveRate
		switch {
		case draining:
			if rate <= 0 {
				rate = DefaultMoveRate
			}
		case d.cfg.FleetSecret == "" || rate < 0 || !stable:
			continue
		case rate == 0:
			rate = DefaultMoveRate
		}
		d.moveRound(ctx, key, draining, rate)
	}
}

// steadiness is the rebalancer's rule against moving on a shaky view: a
// member set is steady when it is the one seen at the previous look.
type steadiness struct{ last *string }

// steady records ms as this look's set and reports whether the previous
// look saw the same.
func (s *steadiness) steady(ms []member) bool {
	key := memberKey(ms)
	same := s.last != nil && *s.last == key
	s.last = &key
	return same
}

// memberKey identifies a member set, whatever its order.
func memberKey(ms []member) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.Name + " " + m.Addr + " " + strconv.FormatFloat(m.Weight, 'g', -1, 64)
	}
	slices.Sort(parts)
	return strings.Join(parts, "\n")
}

// placements counts the cells the rebalancer has placed (a preferred()
// over the members each): tests read it to see a steady fleet costs none.
var placements atomic.Int64

// moveRound hands off, at most rate per second and moveConcurrency at a
// time, every held cell whose preferred member is another node (draining:
// every held cell, to its preferred node among the others). It stops early
// when the member set changes from key (not when draining) or ctx ends.
func (d *Daemon) moveRound(ctx context.Context, key string, draining bool, rate float64) {
	type move struct {
		cell string
		to   member
	}
	var plan []move
	targets := d.members()
	if draining {
		targets = d.others()
	} else if !slices.ContainsFunc(targets, func(m member) bool { return m.Name == d.cfg.Node }) {
		return // this node's own lease is not in its view yet: shaky
	}
	// Which cells to place: all of them when the members changed since
	// the last finished round (or it left work undone, or a drain), else
	// only those claimed or unpinned here since.
	d.ho.mu.Lock()
	all := draining || d.ho.dirty || d.ho.placedKey == nil || *d.ho.placedKey != key
	fresh := d.ho.fresh
	d.ho.fresh, d.ho.dirty = nil, false
	d.ho.mu.Unlock()
	cells := d.heldNow()
	if !all {
		cells = slices.DeleteFunc(cells, func(h *holding) bool { _, ok := fresh[h.name]; return !ok })
	}
	for _, h := range cells {
		if !draining && d.pinnedHere(h) {
			continue
		}
		placements.Add(1)
		if to, ok := preferred(h.name, targets); ok && to.Name != d.cfg.Node {
			plan = append(plan, move{h.name, to})
		}
	}
	undone := atomic.Bool{} // a move not made: look at every cell again next round
	defer func() {
		d.ho.mu.Lock()
		if undone.Load() || draining {
			d.ho.dirty, d.ho.fresh = true, nil
		} else {
			d.ho.placedKey = &key
		}
		d.ho.mu.Unlock()
	}()
	if len(plan) == 0 {
		return
	}
	d.log.Info("moving cells to their preferred nodes", "cells", len(plan), "draining", draining, "rate", rate)
	every := time.Duration(float64(time.Second) / rate)
	sem := make(chan struct{}, moveConcurrency)
	var wg sync.WaitGroup
	for i, mv := range plan {
		if i > 0 && wait.Sleep(ctx, every) != nil {
			undone.Store(true)
			break
		}
		if !draining && memberKey(d.members()) != key {
			undone.Store(true)
			break // the view changed: look again next round
		}
		if draining != d.ho.draining.Load() {
			undone.Store(true)
			break
		}
		if _, err := d.currentNode(); err != nil {
			undone.Store(true)
			break // closing (Close drains the cells itself) or fenced
		}
		if h := d.held(mv.cell); h == nil || (!draining && d.pinnedHere(h)) {
			continue // gone meanwhile, or pinned since the plan was made (its unpin marks it fresh)
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			undone.Store(true)
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			mctx, cancel := context.WithTimeout(ctx, d.cfg.TTL)
			defer cancel()
			if _, err := d.handOff(mctx, mv.cell, mv.to, false); err != nil && errcode.CodeOf(err) != errcode.CodeNotHolder {
				undone.Store(true)
				d.log.Warn("move failed", "cell", mv.cell, "to", mv.to.Name, "err", err)
			}
		})
	}
	wg.Wait()
}
