package daemon

import (
	"net/http"
	"strconv"
	"time"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// Following a log: a read with ?wait= that finds nothing after its
// position waits until a record is committed there, then answers at once.

const (
	// MaxWait bounds ?wait= on a read.
	MaxWait = 60 * time.Second
	// peerMaxWait bounds the wait of a read forwarded to the holder, so
	// that its answer comes back within peerTimeout: such a read may
	// answer empty sooner than its ?wait= said (the client reads again).
	peerMaxWait = peerTimeout - 5*time.Second
	// unheldPoll is how often a waiting read of a cell this node does not
	// hold (and cannot forward) reads the bucket again: an append that
	// lands anywhere is answered within about this long, at one store
	// read per poll.
	unheldPoll = 500 * time.Millisecond
)

// waitParam parses ?wait=: a duration ("5s", "250ms") or whole seconds
// ("5"), 0 to MaxWait.
func waitParam(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		n, nerr := strconv.ParseUint(s, 10, 32)
		if nerr != nil {
			return 0, errcode.Errorf(errcode.CodeBadRequest, "?wait=%q: want a duration (5s, 250ms) or whole seconds, up to %v", s, MaxWait)
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 || d > MaxWait {
		return 0, errcode.Errorf(errcode.CodeBadRequest, "?wait=%q: want 0 to %v", s, MaxWait)
	}
	return d, nil
}

// readWaiting is readRecords that, with wait > 0, waits for a record after
// after when none is committed yet: on a cell held here it sleeps on the
// log's Changed channel, which the commit that acknowledges an append
// closes (no goroutine of its own, no store request while it waits); on
// a cell held elsewhere (no fleet to forward through) or by nobody it
// reads the bucket again every unheldPoll. It answers empty when wait
// runs out, or when the log it waited on ends here (the cell moved
// away); a client that goes away ends it.
func (d *Daemon) readWaiting(w http.ResponseWriter, r *http.Request, name string, after replication.Pos, limit int, barrier bool, wait time.Duration) ([]replication.Record, bool, error) {
	deadline := time.Now().Add(wait)
	for {
		var changed <-chan struct{}
		if wait > 0 {
			if c := d.held(name); c != nil {
				changed = c.log.Changed() // before the read: a commit after it wakes us
			}
		}
		recs, done, err := d.readRecords(w, r, name, after, limit, barrier)
		if done || err != nil || len(recs) > 0 || wait == 0 {
			return recs, done, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, false, nil
		}
		if changed == nil {
			left = min(left, unheldPoll)
		}
		t := time.NewTimer(left)
		select {
		case <-changed:
			if d.held(name) == nil {
				// The log ended here (moved, drained, released): answered
				// empty at once, so that the reader asks again where the
				// cell is now rather than this node polling the bucket.
				t.Stop()
				return nil, false, nil
			}
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return nil, false, errcode.Errorf(errcode.CodeUnavailable, "read %s: the request ended while waiting: %v", name, r.Context().Err())
		}
		t.Stop()
		// A barrier read waited on: what it reads next is as fresh.
		barrier = false
	}
}

// forwardWait sends a waiting read of a cell this node does not hold to
// the live node that does, within a fleet, so that the holder's commit
// wakes it (rather than this node polling the bucket), and reports
// whether it answered. The holder is the hint of a recent forward, else
// the ownership record's (one GET). A read a peer forwarded, a cell held
// here or by nobody, or a holder that is not a verified member is served
// here, and so is one whose holder cannot be dialled. The forwarded wait
// is cut to peerMaxWait.
func (d *Daemon) forwardWait(w http.ResponseWriter, r *http.Request, name string, wait time.Duration) bool {
	if d.cfg.FleetSecret == "" || owner.ValidateName("cell", name) != nil || d.held(name) != nil {
		return false
	}
	if _, ok := peerOf(r.Context()); ok {
		return false
	}
	node, ok := d.hints.get(name, time.Now())
	if !ok {
		rec, exists, err := owner.Inspect(r.Context(), d.b, name)
		if err != nil || !exists || rec.Released() {
			return false
		}
		node = rec.Node
	}
	if node == d.cfg.Node {
		return false
	}
	to, ok := d.trustedPeer(node)
	if !ok {
		// A view that has not seen the holder's lease yet reads it (one GET).
		if n, err := d.currentNode(); err == nil {
			_, _ = n.Observer().Observe(r.Context(), node)
		}
		if to, ok = d.trustedPeer(node); !ok {
			return false
		}
	}
	if wait > peerMaxWait {
		r = r.Clone(r.Context())
		q := r.URL.Query()
		q.Set("wait", peerMaxWait.String())
		u := *r.URL
		u.RawQuery = q.Encode()
		r.URL = &u
	}
	if err := d.tryForward(w, r, to, nil, false); err != nil {
		d.forwardFailedSilently(r, to)
		return false // a holder that cannot be dialled: served here
	}
	return true
}

// tailCell is GET /v1/cells/{cell}/tail: where the log ends, answered by
// the holder after a barrier, so that it is linearizable through any
// node. It is routed as a barrier read is: with a fleet, to the holder
// (or the preferred node, which claims a free cell); without one, a node
// that does not hold the cell refuses (DEED-E024, naming who does).
func (d *Daemon) tailCell(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("cell")
	if err := owner.ValidateName("cell", name); err != nil {
		writeError(w, err)
		return
	}
	ctx, fleet := r.Context(), d.cfg.FleetSecret != ""
	for range maxRetiredRetries {
		c := d.held(name)
		if c == nil {
			if !fleet {
				writeError(w, d.notHeldFor(ctx, "tail of "+name, name, "ask its holder", ""))
				return
			}
			if d.route(w, r, nil) {
				return
			}
			var err error
			if c, err = d.acquire(ctx, name, false); err != nil {
				if !d.reroute(w, r, nil, err) {
					writeError(w, err)
				}
				return
			}
		}
		c.c.begin()
		t, err := c.log.Tail(ctx)
		c.c.end()
		if c.retiredUnder(err) {
			continue // ask where the cell is now
		}
		if err = closedUnder(c, err); err != nil {
			writeError(w, err)
			return
		}
		writeJSONStatus(w, http.StatusOK, client.Tail{Cell: name, NextPos: uint64(t.NextPos), Epoch: c.lease.Epoch(), Node: d.cfg.Node, TS: t.TS})
		return
	}
	writeError(w, errcode.Errorf(errcode.CodeUnavailable, "tail of %s: the cell was retired under the request %d times; retry", name, maxRetiredRetries))
}
