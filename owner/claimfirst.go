package owner

import (
	"context"
	"errors"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
)

// maxHints bounds how many cells a node remembers (see hintTable): about
// 100 bytes each, so at most a couple of MB however many cells pass through
// a long-lived daemon. Forgetting a hint costs one round trip, never
// correctness.
const maxHints = 16384

// maxLean bounds hintTable.lean: after a run of cells that all existed (or
// all did not), this many claims of the other kind switch the first request
// back.
const maxLean = 4

// hintTable is what a node remembers of cells it does not hold; n.mu guards
// it. The zero value is ready.
type hintTable struct {
	cells map[string]Hint
	// lean weighs, for cells this node knew nothing about, how many existed
	// (+1 each) against how many had never been claimed (−1 each), within
	// ±maxLean. Such a cell is claimed with a create-only PUT first only
	// while lean <= 0: where most unknown cells exist (a node taking over a
	// dead peer's cells, or cells that move between nodes), the refused
	// create would cost one round trip more than reading first; after one
	// refusal the node reads first instead (2 RTT), and returns to creating
	// first once as many unknown cells turned out absent.
	lean int
	// stops is the observer's count of stopped peers (Observer.stopCount)
	// as of the last claim.
	stops uint64
}

// peersStopped learns the observer's count of stopped peers. When it grew,
// the cells this node knows nothing about are likely the stopped peers'
// (their clients come here next), which exist: lean tips to reading
// first, so that the takeover of such a cell costs a read and a write, not
// a refused create before them. One absent cell tips it back.
func (t *hintTable) peersStopped(stops uint64) {
	if stops != t.stops {
		t.stops = stops
		t.lean = max(t.lean, 1)
	}
}

func (t *hintTable) get(cell string) Hint { return t.cells[cell] }

// createFirst says whether a cell this node knows nothing about is more
// likely absent than not, judged by those it met so far.
func (t *hintTable) createFirst() bool { return t.lean <= 0 }

// unknownWas records whether a cell this node knew nothing about existed.
func (t *hintTable) unknownWas(exists bool) {
	if exists {
		t.lean = min(t.lean+1, maxLean)
	} else {
		t.lean = max(t.lean-1, -maxLean)
	}
}

// note remembers h for cell, replacing what was known unless keep is set
// and something is. When the table is full an arbitrary entry goes: the
// next claim of that cell guesses as if it knew nothing.
func (t *hintTable) note(cell string, h Hint, keep bool) {
	if _, ok := t.cells[cell]; ok && keep {
		return
	}
	if t.cells == nil {
		t.cells = map[string]Hint{}
	}
	if _, ok := t.cells[cell]; !ok && len(t.cells) >= maxHints {
		for k := range t.cells {
			delete(t.cells, k)
			break
		}
	}
	t.cells[cell] = h
}

// drop forgets cell: it is held, and its lease knows the ETag.
func (t *hintTable) drop(cell string) { delete(t.cells, cell) }

// readOwn records what a read of own.json found: a cell met for the first
// time weighs in lean, and a cell that exists is read first from now on.
func (t *hintTable) readOwn(cell string, exists bool) {
	if _, ok := t.cells[cell]; !ok {
		t.unknownWas(exists)
	}
	if exists {
		t.note(cell, Hint{Known: true}, true)
	}
}

// claimFirst tries the claim Guess proposes before own.json is read: a
// create-only PUT for a cell this node knows nothing about (while such cells
// have mostly been absent, see hintTable), or an If-Match PUT on the ETag of
// this node's own release. done is false when the caller must read and
// decide as usual: there was no guess, or the store refused it (412, 409, or
// 404 on If-Match), which means the cell exists or changed since the
// release. Nothing was written then.
//
// A guess whose outcome is ambiguous is settled like any claim's: the record
// is read back, and it applied iff it carries this attempt's nonce; if it
// cannot be read, the answer is DEED-E012, never a refusal.
func (n *Node) claimFirst(ctx context.Context, cell string, opts ClaimOptions) (l *Lease, reason string, err error, done bool) {
	stops := n.obs.stopCount()
	n.mu.Lock()
	n.hints.peersStopped(stops)
	h := n.hints.get(cell)
	if _, ok := n.held[cell]; ok {
		h = Hint{Known: true} // re-entry: the record names this node
	}
	if !h.Known && !n.hints.createFirst() {
		h.Known = true // unknown, but unknown cells have mostly existed
	}
	n.mu.Unlock()
	d, etag, ok := Guess(h, opts.Force)
	if !ok {
		return nil, "", nil, false
	}
	key := CellKey(cell)
	rec := Record{Node: n.cfg.Name, Epoch: d.Epoch, Nonce: newNonce(), AtMS: n.cfg.WallClock().UnixMilli(), Inc: n.leaseIncarnation()}
	cond := bucket.IfAbsent
	var prev *PrevEnd
	var unmarked uint64
	if d.Action == Take {
		cond = bucket.IfMatch(etag)
		// As in claim: the record carries the release's Announces, or
		// announces its own epoch when the claim takes the release's end.
		unmarked = h.Announces
		if rec.succeed(h.Epoch, h.Announces, h.End) {
			prev = &PrevEnd{Epoch: h.Epoch, End: *h.End, Own: h.own, TS: h.ts}
		}
	}
	sealRead := n.readSealAhead(ctx, cell, prev)
	newETag, err := n.b.Put(ctx, key, rec.marshal(), cond)
	sealRead()
	switch {
	case err == nil:
	case errors.Is(err, bucket.ErrPrecondition), errors.Is(err, bucket.ErrConflict):
		n.mu.Lock()
		if d.Action == Create && errors.Is(err, bucket.ErrPrecondition) {
			n.hints.unknownWas(true)
		}
		// Read first from now on; the read that follows must not weigh
		// this cell in again.
		n.hints.note(cell, Hint{Known: true}, false)
		n.mu.Unlock()
		n.log.Debug("first claim write refused; reading", "cell", cell, "guess", d.Reason, "err", err)
		return nil, "", nil, false
	case bucket.Permanent(err):
		return nil, "", errcode.Wrap(err, "claim %s", cell), true
	default:
		applied, got, rerr := n.reconcile(ctx, key, rec)
		if errors.Is(rerr, bucket.ErrNoBucket) {
			// No bucket, so no record: the write cannot have landed.
			return nil, "", errcode.Wrap(rerr, "claim %s", cell), true
		}
		if rerr != nil {
			return nil, "", errcode.Errorf(errcode.CodeAmbiguous, "claim %s: outcome unknown: %v (read back: %w)", cell, err, rerr), true
		}
		if !applied {
			n.mu.Lock()
			n.hints.note(cell, Hint{Known: true}, false)
			n.mu.Unlock()
			return nil, "", nil, false
		}
		newETag = got
	}
	n.mu.Lock()
	if d.Action == Create {
		n.hints.unknownWas(false)
	}
	n.mu.Unlock()
	l = n.mint(cell, rec, newETag, d.Action == Create, prev, unmarked)
	if err := l.Err(); err != nil {
		return nil, d.Reason, errcode.Wrap(err, "claim %s", cell), true
	}
	n.log.Info("claimed", "cell", cell, "epoch", rec.Epoch, "reason", d.Reason, "prev_node", "")
	return l, d.Reason, nil, true
}

// ReleasedHint is what this node's own release of cell wrote (its
// ReleasedETag and epoch), while the node still remembers it; ok is false
// otherwise. A node handing a cell to a peer passes it on (see NoteHint), so
// that the peer's claim is one If-Match PUT instead of a read and a write.
//
// A release that carries Announces (one that named no end after a claim
// that took an end) is not handed out: a peer's claim on it must carry
// that epoch on, and a hint passed along without the field would drop it.
// The peer reads own.json instead. The node's own memory of its seal is
// not handed out either (a peer reads the seal).
func (n *Node) ReleasedHint(cell string) (h Hint, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h = n.hints.get(cell)
	if h.Announces != 0 {
		return Hint{}, false
	}
	h.own, h.ts = false, 0
	return h, h.ReleasedETag != ""
}

// NoteHint makes this node's next claim of cell try h first, as if it had
// released the cell itself: a peer's word on the record it released. It is
// only a guess: a record changed since is refused by its If-Match (412),
// and the claim reads and decides as usual, so a stale or wrong hint costs
// one round trip, never correctness.
func (n *Node) NoteHint(cell string, h Hint) {
	if h.ReleasedETag == "" {
		return
	}
	h.Known = true
	h.own, h.ts = false, 0 // a peer's word on its seal is read before it is trusted
	n.mu.Lock()
	n.hints.note(cell, h, false)
	n.mu.Unlock()
}
