package owner

import (
	"context"
	"errors"

	"github.com/deedkit/deed/bucket"
)

// maxHints bounds how many cells a node remembers (see Node.hints): about
// 100 bytes each, so at most a couple of MB however many cells pass through
// a long-lived daemon. Forgetting a hint costs one round trip, never
// correctness.
const maxHints = 16384

// claimFirst tries the claim Guess proposes before own.json is read: a
// create-only PUT for a cell this node knows nothing about, or an If-Match
// PUT on the ETag of this node's own release. done is false when the caller
// must read and decide as usual: there was no guess, or the store refused it
// (412, 409, or 404 on If-Match), which means the cell exists or changed
// since the release. Nothing was written then.
//
// A guess whose outcome is ambiguous is settled like any claim's: the record
// is read back, and it applied iff it carries this attempt's nonce; if it
// cannot be read, the answer is DEED-E012, never a refusal.
func (n *Node) claimFirst(ctx context.Context, cell string, opts ClaimOptions) (l *Lease, reason string, err error, done bool) {
	n.mu.Lock()
	h := n.hints[cell]
	if _, ok := n.held[cell]; ok {
		h = Hint{Known: true} // re-entry: the record names this node
	}
	n.mu.Unlock()
	d, etag, ok := Guess(h, opts.Force)
	if !ok {
		return nil, "", nil, false
	}
	key := CellKey(cell)
	rec := Record{Node: n.cfg.Name, Epoch: d.Epoch, Nonce: newNonce(), AtMS: n.cfg.WallClock().UnixMilli(), Inc: n.leaseIncarnation()}
	cond := bucket.IfAbsent
	if d.Action == Take {
		cond = bucket.IfMatch(etag)
	}
	newETag, err := n.b.Put(ctx, key, rec.marshal(), cond)
	switch {
	case err == nil:
	case errors.Is(err, bucket.ErrPrecondition), errors.Is(err, bucket.ErrConflict):
		n.forgetHint(cell)
		n.log.Debug("first claim write refused; reading", "cell", cell, "guess", d.Reason, "err", err)
		return nil, "", nil, false
	default:
		applied, got, rerr := n.reconcile(ctx, key, rec)
		if rerr != nil {
			return nil, "", bucket.Errorf(bucket.CodeAmbiguous, "claim %s: outcome unknown: %v (read back: %w)", cell, err, rerr), true
		}
		if !applied {
			n.forgetHint(cell)
			return nil, "", nil, false
		}
		newETag = got
	}
	l = n.mint(cell, rec, newETag)
	if err := l.Err(); err != nil {
		return nil, d.Reason, bucket.Wrap(err, "claim %s", cell), true
	}
	n.log.Info("claimed", "cell", cell, "epoch", rec.Epoch, "reason", d.Reason, "prev_node", "")
	return l, d.Reason, nil, true
}

// noteHint remembers h for cell, replacing what was known unless keep is set
// and something is. When the table is full an arbitrary entry goes: the
// next claim of that cell reads first, as without hints. n.mu must be held.
func (n *Node) noteHint(cell string, h Hint, keep bool) {
	if _, ok := n.hints[cell]; ok && keep {
		return
	}
	if n.hints == nil {
		n.hints = map[string]Hint{}
	}
	if _, ok := n.hints[cell]; !ok && len(n.hints) >= maxHints {
		for k := range n.hints {
			delete(n.hints, k)
			break
		}
	}
	n.hints[cell] = h
}

// forgetHint drops what the node remembered of cell.
func (n *Node) forgetHint(cell string) {
	n.mu.Lock()
	delete(n.hints, cell)
	n.mu.Unlock()
}
