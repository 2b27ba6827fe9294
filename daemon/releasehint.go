package daemon

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
)

// Release hints: a node of a fleet that releases a cell (an operator's
// release through the API, an idle release) tells the node a client's next
// request for the cell will be routed to what its release wrote (the
// released record's ETag and epoch, and the chain end it sealed), as a move
// tells its target (handoff.go). That node's next claim of the cell is then
// one If-Match PUT, with the seal's GET beside it, instead of a refused
// create-only PUT, a read and a PUT: its first append costs 3 store
// requests instead of 5.
//
// The push is only a courtesy, so that it can never cost a release
// anything: it is sent after the release has been answered, in the
// background, once, bounded by hintPushTimeout, and at most
// maxHintPushes at a time (beyond that it is not sent). The receiver
// claims nothing; it remembers the hint (owner.Node.NoteHint), which is a
// guess like every hint: its claim's If-Match on the ETag is what makes it
// correct, a stale or forged one costs a 412 and the ordinary read, and the
// end it names is used only after the seal there has been read. A push
// that is lost, late or refused leaves the first append at 5.

const (
	// hintPushTimeout bounds one push (dial and answer): a hint that takes
	// longer is likely to land after the request it was for.
	hintPushTimeout = 5 * time.Second
	// maxHintPushes bounds the pushes in flight, so that an idle sweep
	// releasing thousands of cells at once sends at most this many
	// requests to its peers at a time; the others are dropped, and those
	// cells' first appends cost what they cost without a push.
	maxHintPushes = 16
)

// The results of deed_release_hints_total.
const (
	hintPushOK      = "ok"
	hintPushError   = "error"
	hintPushDropped = "dropped"
)

// hintTarget is the node a client's request for cell goes to when nobody
// holds it, as decideRoute sends it from a node with no recent server of
// the cell in mind: the preferred live member. ok is false when that is
// this node (whose own release hint serves it already), or there is no
// fleet or no view.
func (d *Daemon) hintTarget(cell string) (member, bool) {
	if d.cfg.FleetSecret == "" {
		return member{}, false
	}
	to, ok := preferred(cell, d.members())
	if !ok || to.Name == d.cfg.Node || to.Addr == "" {
		return member{}, false
	}
	return to, true
}

// pushReleaseHint sends, in the background, the hint this node's release
// of cell left to the node hintTarget names. It never blocks: the release
// it follows has been answered, or is answered without waiting. Nothing
// is sent when the release left no hint a peer may use
// (owner.Node.ReleasedHint refuses one that carries Announces).
func (d *Daemon) pushReleaseHint(cell string) {
	to, ok := d.hintTarget(cell)
	if !ok {
		return
	}
	n, err := d.currentNode()
	if err != nil {
		return
	}
	hint, ok := n.ReleasedHint(cell)
	if !ok {
		return
	}
	if d.hintPushes.Add(1) > maxHintPushes {
		d.hintPushes.Add(-1)
		d.m.releaseHints.WithLabelValues(hintPushDropped).Inc()
		return
	}
	// Close waits for d.wg once closed is set: no Add after that.
	d.mu.Lock()
	if d.closed || d.bg == nil {
		d.mu.Unlock()
		d.hintPushes.Add(-1)
		return
	}
	d.wg.Add(1)
	bg := d.bg
	d.mu.Unlock()
	go func() {
		defer d.wg.Done()
		defer d.hintPushes.Add(-1)
		ctx, cancel := context.WithTimeout(bg, min(hintPushTimeout, d.cfg.TTL))
		defer cancel()
		if err := d.sendReleaseHint(ctx, cell, to, hint); err != nil {
			d.m.releaseHints.WithLabelValues(hintPushError).Inc()
			d.log.Debug("release hint not delivered; the cell's next claim there reads its record first", "cell", cell, "to", to.Name, "err", err)
			return
		}
		d.m.releaseHints.WithLabelValues(hintPushOK).Inc()
	}()
}

// sendReleaseHint is one push of hint for cell to the member to
// (POST /v1/cells/{cell}/hint, a peer request), answered 204 when noted.
func (d *Daemon) sendReleaseHint(ctx context.Context, cell string, to member, hint owner.Hint) error {
	if m, ok := d.trustedPeer(to.Name); !ok || m.Addr != to.Addr {
		return errcode.Errorf(errcode.CodeUnavailable, "release hint to %s: node %s is not a verified member of this fleet now; nothing sent", to.Addr, to.Name)
	}
	pr, err := d.newPeerRequest(ctx, to.Name, to.Addr, http.MethodPost, "/v1/cells/"+url.PathEscape(cell)+"/hint", nil)
	if err != nil {
		return err
	}
	setHintHeaders(pr.req.Header, hint)
	resp, nonce, err := d.sendPeer(pr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if !answerVerified(d.peers.key, nonce, resp, raw) {
		return errcode.Errorf(errcode.CodePeer, "%s answered %s without a valid peer proof: not believed", to.Name, resp.Status)
	}
	if resp.StatusCode != http.StatusNoContent {
		return errcode.Errorf(errcode.CodePeer, "%s answered %s: %s", to.Name, resp.Status, raw)
	}
	return nil
}

// setHintHeaders puts hint in the headers a handoff push carries it in
// (covered by the peer proof: peerSigned).
func setHintHeaders(h http.Header, hint owner.Hint) {
	h.Set(headerHandoffETag, hint.ReleasedETag)
	h.Set(headerHandoffEpoch, strconv.FormatUint(hint.Epoch, 10))
	if hint.End != nil {
		h.Set(headerHandoffEnd, formatHandoffEnd(*hint.End))
	}
}

// hintHeaders reads the release hint those headers carry: no ETag when
// they carry none, epoch 0 when it is missing or not a number (no released
// record has epoch 0); an end that does not parse is DEED-E040.
func hintHeaders(h http.Header) (owner.Hint, error) {
	hint := owner.Hint{ReleasedETag: h.Get(headerHandoffETag)}
	hint.Epoch, _ = strconv.ParseUint(h.Get(headerHandoffEpoch), 10, 64)
	if v := h.Get(headerHandoffEnd); v != "" {
		e, err := parseHandoffEnd(v)
		if err != nil {
			return owner.Hint{}, err
		}
		hint.End = &e
	}
	return hint, nil
}

// takeReleaseHint serves POST /v1/cells/{cell}/hint, a peer's word that it
// released cell (the headers of a handoff push): the hint is remembered
// for this node's next claim of the cell, and nothing is claimed. Peers
// only (the fleet secret): a client's is DEED-E041. A hint for a cell held
// here, or older than one this node has, is ignored: it can only be stale
// (a push that arrived late).
func (d *Daemon) takeReleaseHint(w http.ResponseWriter, r *http.Request) {
	if _, ok := peerOf(r.Context()); !ok {
		writeError(w, errcode.Errorf(errcode.CodeUnauthorized, "hint: only a peer of this fleet (with the fleet secret) may push a release hint"))
		return
	}
	name := r.PathValue("cell")
	if err := owner.ValidateName("cell", name); err != nil {
		writeError(w, err)
		return
	}
	hint, err := hintHeaders(r.Header)
	if err == nil && (hint.ReleasedETag == "" || hint.Epoch == 0) {
		err = errcode.Errorf(errcode.CodeBadRequest, "hint: %s and %s (an epoch > 0) are required; nothing noted (the pushing node runs another version: upgrade every node of the fleet together)", headerHandoffETag, headerHandoffEpoch)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	n, err := d.currentNode()
	if err != nil {
		writeError(w, err)
		return
	}
	if d.held(name) == nil {
		if cur, ok := n.ReleasedHint(name); !ok || cur.Epoch < hint.Epoch {
			n.NoteHint(name, hint)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}
