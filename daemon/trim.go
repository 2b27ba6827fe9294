package daemon

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// Trimming a log: POST /v1/cells/{cell}/trim?before=P raises the cell's
// durable trim point (replication.RaiseTrim, cells/<cell>/trim.json);
// reads that start below it are refused (DEED-E046, 410 Gone, naming the
// first position served), and the holder deletes, in the background and
// at a bounded rate, the record files wholly below it that the newest
// snapshot covers (replication.GC bounded by the trim point: seals,
// tombstones and announcements are never deleted, nor a record file of an
// epoch that may still write).

const (
	// trimRecheck is how old the trim point a node that does not hold the
	// cell checks a read against may be: older, the read reads it again
	// (one GET, on the read's path: an idle cell costs nothing). The
	// holder reads it once per lease and learns its own raises at once.
	trimRecheck = 2 * time.Second
	// DefaultTrimDeleteRate bounds the deletes per second of a node's
	// background trim deletion (Config.TrimDeleteRate).
	DefaultTrimDeleteRate = 50
	// HeaderFirstPos is, on a read refused below the trim point
	// (DEED-E046), the first position still served.
	HeaderFirstPos = "Deed-First-Pos"
	// maxTrimSeen bounds the trim points remembered for cells not held.
	maxTrimSeen = 4096
)

// trimSeen is one cell's trim point as a node last read or raised it.
type trimSeen struct {
	before replication.Pos
	at     time.Time
	// lease is the holder's lease it was read or raised under (nil: read
	// by a node that did not hold the cell), so that a new lease, here or
	// after a takeover, reads it again.
	lease *owner.Lease
}

// trims is a node's memory of trim points, and its background deletion.
type trims struct {
	mu   sync.Mutex
	seen map[string]trimSeen
	// pending holds, per cell, the trim point to delete below; running is
	// set while the deletion goroutine works through it.
	pending map[string]replication.Pos
	running bool
	next    time.Time // when the next delete may be sent (the rate bound)
}

// trimPoint is the trim point a read of name by h (nil: not the holder)
// is checked against. The holder reads it once per lease: it is where
// every raise is routed while it holds the cell, and it remembers its own.
// Anyone else reads it again when what it knows is older than trimRecheck
// (fresh forces a read). A point only rises, so a stale one can only serve
// a record that is still there, never refuse one still served.
func (d *Daemon) trimPoint(ctx context.Context, name string, h *holding, fresh bool) (replication.Pos, error) {
	var lease *owner.Lease
	if h != nil {
		lease = h.lease
	}
	now := time.Now()
	d.tr.mu.Lock()
	s, ok := d.tr.seen[name]
	d.tr.mu.Unlock()
	if ok && !fresh && ((lease != nil && s.lease == lease) || (lease == nil && now.Sub(s.at) < trimRecheck)) {
		return s.before, nil
	}
	before, _, err := replication.ReadTrim(ctx, d.b, name)
	if err != nil {
		return 0, err
	}
	d.noteTrim(name, before, lease, now)
	return before, nil
}

// noteTrim remembers before as name's trim point, never lowering one
// already known.
func (d *Daemon) noteTrim(name string, before replication.Pos, lease *owner.Lease, at time.Time) {
	d.tr.mu.Lock()
	defer d.tr.mu.Unlock()
	if d.tr.seen == nil {
		d.tr.seen = map[string]trimSeen{}
	}
	if old, ok := d.tr.seen[name]; ok && old.before > before {
		before = old.before
	}
	if len(d.tr.seen) >= maxTrimSeen {
		for k, v := range d.tr.seen {
			if v.lease == nil && at.Sub(v.at) >= trimRecheck {
				delete(d.tr.seen, k)
			}
		}
		if len(d.tr.seen) >= maxTrimSeen {
			clear(d.tr.seen)
		}
	}
	d.tr.seen[name] = trimSeen{before: before, at: at, lease: lease}
}

// checkTrim refuses a read of name after `after` that starts below its
// trim point (DEED-E046).
func (d *Daemon) checkTrim(ctx context.Context, name string, h *holding, after replication.Pos, fresh bool) error {
	before, err := d.trimPoint(ctx, name, h, fresh)
	if err != nil {
		return errcode.Wrap(err, "read %s", name)
	}
	return replication.CheckTrim(name, after, before)
}

// trimCell is POST /v1/cells/{cell}/trim?before=P[&past_snapshot=true]:
// records below P are no longer served. It is routed as an append is, to
// the holder (or the node placed to hold it, which claims a free cell;
// without a fleet, the node asked claims it or refuses with DEED-E020), so
// that P is checked against the committed tail, and the holder, which
// every raise reaches while it holds the cell, knows the point without
// reading it. P past the tail is refused; P past the newest snapshot's
// successor (the first position no snapshot covers) is refused too unless
// past_snapshot=true says that records no snapshot covers may stop being
// served. The answer is the trim point in effect, which may be higher
// than P (a trim only raises it).
func (d *Daemon) trimCell(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("cell")
	if err := owner.ValidateName("cell", name); err != nil {
		writeError(w, err)
		return
	}
	s := r.URL.Query().Get("before")
	before, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		writeError(w, errcode.Errorf(errcode.CodeBadRequest, "trim %s: ?before=%q: want the first position still to be served (records below it are trimmed), a non-negative integer", name, s))
		return
	}
	pastSnap, err := boolParam(r, "past_snapshot")
	if err != nil {
		writeError(w, err)
		return
	}
	var now replication.Pos
	c, answered, err := d.onHolder(w, r, nil, name, func(c *holding) (err error) {
		now, err = d.raiseTrim(r.Context(), c, replication.Pos(before), pastSnap)
		return err
	})
	if answered {
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSONStatus(w, http.StatusOK, client.TrimResult{Cell: name, Before: uint64(now), Epoch: c.lease.Epoch()})
}

// raiseTrim raises c's trim point to before, on its holder, after the
// checks trimCell describes, and schedules the deletion below it.
func (d *Daemon) raiseTrim(ctx context.Context, c *holding, before replication.Pos, pastSnap bool) (replication.Pos, error) {
	if err := c.lease.Err(); err != nil {
		return 0, err
	}
	cur, err := d.trimPoint(ctx, c.name, c, false)
	if err != nil {
		return 0, errcode.Wrap(err, "trim %s", c.name)
	}
	if before <= cur {
		return cur, nil // already there: nothing to write
	}
	if tail := c.log.Head().NextPos; before > tail {
		return 0, errcode.Errorf(errcode.CodeBadRequest, "trim %s before %d: past the committed tail (the log's next position is %d): trim before %d at most; nothing was trimmed", c.name, before, tail, tail)
	}
	if !pastSnap {
		first := replication.Pos(1) // the first position no snapshot covers
		snap, err := replication.LatestSnapshot(ctx, d.b, c.name)
		if err != nil {
			return 0, errcode.Wrap(err, "trim %s before %d: find the newest snapshot", c.name, before)
		}
		if snap != nil {
			first = snap.NextPos
		}
		if before > first {
			what := "the cell has no snapshot"
			if snap != nil {
				what = "its newest snapshot covers positions up to " + strconv.FormatUint(uint64(first)-1, 10)
			}
			return 0, errcode.Errorf(errcode.CodeBadRequest, "trim %s before %d: past the newest snapshot's successor %d (%s), so records %d to %d would be served by nothing: write a snapshot up to %d first (deed snapshot; PUT /v1/cells/%s/snapshot?upto=%d) or trim with past_snapshot=true (deed trim --past-snapshot) to stop serving them anyway; nothing was trimmed", c.name, before, first, what, first, before-1, before-1, c.name, before-1)
		}
	}
	now, err := replication.RaiseTrim(ctx, d.b, c.name, before)
	if err != nil {
		return 0, err
	}
	d.noteTrim(c.name, now, c.lease, time.Now())
	d.scheduleTrimDelete(c.name, now)
	return now, nil
}

// scheduleTrimDelete queues the deletion of name's files wholly below
// before; one goroutine per node works through the queue and ends when it
// is empty (an idle node runs none).
func (d *Daemon) scheduleTrimDelete(name string, before replication.Pos) {
	if before <= 1 {
		return
	}
	d.tr.mu.Lock()
	if d.tr.pending == nil {
		d.tr.pending = map[string]replication.Pos{}
	}
	if before > d.tr.pending[name] {
		d.tr.pending[name] = before
	}
	start := !d.tr.running
	d.tr.running = true
	d.tr.mu.Unlock()
	if !start {
		return
	}
	d.mu.Lock()
	if d.closed || d.bg == nil {
		d.mu.Unlock()
		d.tr.mu.Lock()
		d.tr.running = false
		d.tr.mu.Unlock()
		return
	}
	d.wg.Add(1)
	ctx := d.bg
	d.mu.Unlock()
	go d.runTrimDeletes(ctx)
}

// runTrimDeletes deletes, cell after cell, what the queued trims allow.
func (d *Daemon) runTrimDeletes(ctx context.Context) {
	defer d.wg.Done()
	for {
		d.tr.mu.Lock()
		var (
			name   string
			before replication.Pos
		)
		for k, v := range d.tr.pending {
			name, before = k, v
			break
		}
		if name == "" || ctx.Err() != nil {
			d.tr.running = false
			d.tr.mu.Unlock()
			return
		}
		delete(d.tr.pending, name)
		d.tr.mu.Unlock()
		if err := d.deleteTrimmed(ctx, name, before); err != nil && ctx.Err() == nil {
			d.log.Warn("trim: background deletion failed (the next trim or snapshot of the cell tries again; deed gc deletes it too)", "cell", name, "before", before, "err", err)
		}
	}
}

// deleteTrimmed runs GC on name bounded by the trim point before: only
// record files at slots below the one holding position before (wholly
// below it) that the newest snapshot covers, in a sealed epoch, outside
// the idempotency window, at most Config.TrimDeleteRate a second.
func (d *Daemon) deleteTrimmed(ctx context.Context, name string, before replication.Pos) error {
	below, err := d.slotOf(ctx, name, before)
	if err != nil || below == 0 {
		return err
	}
	rep, err := replication.GC(ctx, d.b, name, replication.GCOptions{Below: below, Pace: d.paceDelete}, d.logOpts)
	if err != nil {
		return err
	}
	d.m.trimDeleted.Add(float64(len(rep.Deleted)))
	d.log.Info("trim: deleted below the trim point", "cell", name, "before", before, "files", len(rep.Deleted), "bytes", rep.Bytes)
	return nil
}

// slotOf is the slot of the record file that holds position p (files at
// lower slots hold only positions below p), or the chain's next slot when
// p is not written yet; 0 when p was compacted already (nothing below it
// is left that a trim may delete and GC would not).
func (d *Daemon) slotOf(ctx context.Context, name string, p replication.Pos) (replication.TxID, error) {
	var (
		recs []replication.Record
		err  error
	)
	if h := d.held(name); h != nil {
		if head := h.log.Head(); p >= head.NextPos {
			return head.Next, nil
		}
		h.c.begin()
		recs, err = h.log.Read(ctx, p-1, 1, false)
		h.c.end()
	} else {
		recs, err = replication.Read(ctx, d.b, name, p-1, 1)
	}
	switch {
	case errors.Is(err, replication.ErrCompacted):
		return 0, nil
	case err != nil:
		return 0, err
	case len(recs) == 0:
		return ^replication.TxID(0), nil // the chain ends before p: every file is below it
	}
	return recs[0].TxID, nil
}

// paceDelete waits until the next background delete may be sent.
func (d *Daemon) paceDelete(ctx context.Context) error {
	rate := d.cfg.TrimDeleteRate
	if rate <= 0 {
		rate = DefaultTrimDeleteRate
	}
	d.tr.mu.Lock()
	now := time.Now()
	at := now
	if d.tr.next.After(now) {
		at = d.tr.next
	}
	d.tr.next = at.Add(time.Duration(float64(time.Second) / rate))
	d.tr.mu.Unlock()
	if wait := at.Sub(now); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
