package owner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/deedkit/deed/errcode"
)

// watchParallel bounds the ownership-record reads one watch round runs at
// once.
const watchParallel = 8

// watchInterval is how often an opened node re-reads the records of the
// cells it holds, or 0 when it does not.
func (c *Config) watchInterval() time.Duration {
	switch {
	case c.WatchInterval < 0:
		return 0
	case c.WatchInterval == 0:
		return c.TTL / 3
	default:
		return c.WatchInterval
	}
}

// watchHeld re-reads, every interval while the node is open, the
// ownership record of each cell it holds, and ends as superseded
// (DEED-E021) every lease whose record no longer carries its claim: another
// node took the cell over (a forced claim, or a takeover after judging this
// node dead) or an operator released it with --force. Without it a lease
// learns this only at its next data-path write, and a holder that writes
// nothing (it runs a command, or guards work done elsewhere) would go on
// believing it owns the cell. It costs one GET per held cell and interval.
//
// Store errors are logged and the lease is kept: if the store stays
// unreachable the node fences, which ends every lease too.
func (n *Node) watchHeld(ctx context.Context, interval time.Duration) {
	defer n.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.fenced:
			return
		case <-t.C:
		}
		// A round never runs into the next one.
		rctx, cancel := context.WithTimeout(ctx, interval)
		sem := make(chan struct{}, watchParallel)
		var wg sync.WaitGroup
		for _, l := range n.Held() {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				n.checkRecord(rctx, l)
			})
		}
		wg.Wait()
		cancel()
	}
}

// checkRecord reads l's ownership record once and ends l if the record
// shows that l's claim no longer holds the cell.
func (n *Node) checkRecord(ctx context.Context, l *Lease) {
	if l.Err() != nil {
		return
	}
	rec, exists, err := Inspect(ctx, n.b, l.Cell())
	// This node's own release writes a record without l's claim before it
	// ends l: a record read while a release is under way says nothing
	// about others. Checked after the read, as the release marks itself
	// before it writes.
	if l.isReleasing() {
		return
	}
	switch {
	case err != nil && errcode.CodeOf(err) == errcode.CodeCorruptOwner:
		l.Supersede(errors.New("own.json was overwritten with something that is not an ownership record"))
	case err != nil:
		if ctx.Err() == nil {
			n.log.Warn("cannot read the ownership record; still holding", "cell", l.Cell(), "err", err)
		}
	case !exists:
		l.Supersede(errors.New("own.json was deleted"))
	case rec.Nonce != l.Token():
		if rec.Released() && rec.Epoch > l.Epoch() {
			// A one-shot claim: a fence, which leaves no holder.
			l.Supersede(fmt.Errorf("fenced by a claim at epoch %d (no holder now)", rec.Epoch))
		} else if rec.Released() {
			l.Supersede(fmt.Errorf("released by someone else at epoch %d", rec.Epoch))
		} else {
			l.Supersede(fmt.Errorf("now held by node %s at epoch %d", rec.Node, rec.Epoch))
		}
	}
}
