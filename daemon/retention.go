package daemon

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// Retention (Config.Retention, deed run --retention): on every cell held
// here, records older than the retention (by their timestamp) are trimmed
// automatically. A node remembers, per held cell and lease, the first
// record still served and its timestamp, and a sweep compares them with
// the clock in memory: a cell where nothing expired costs no store request.
// Only when the first record has expired does the sweep read on from it to
// the first record that has not, and raise the trim point there (by
// replication.RaiseTrim, as a trim through the API does, past the newest
// snapshot if need be: configuring a retention says that expired records
// are not to be served; their files are deleted once a snapshot covers
// them). What a node learns at a lease's first sweep costs one read of the
// trim point and one of a record.

// retainState is what a node knows of a held cell's first served record.
type retainState struct {
	lease *owner.Lease
	// first is the first position served (the trim point, or above it
	// when positions from it were read and found younger); ts is that
	// record's timestamp (ms), or, when there was none (the log ended at
	// first), 0 and tail is the log's next position then.
	first replication.Pos
	ts    int64
	tail  replication.Pos
	// seen is when a record appeared at first after the log ended there
	// (0: not yet): its timestamp is no later, so expiring from seen never
	// trims early.
	seen int64
}

type retention struct {
	mu    sync.Mutex
	cells map[string]*retainState
}

// retentionEvery is how often the retention sweep runs.
func retentionEvery(r time.Duration) time.Duration {
	return min(max(r/4, 10*time.Millisecond), 10*time.Second)
}

// startRetention starts the sweep when Config.Retention is set.
func (d *Daemon) startRetention(ctx context.Context) {
	if d.cfg.Retention <= 0 {
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		t := time.NewTicker(retentionEvery(d.cfg.Retention))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				d.retentionSweep(ctx)
			}
		}
	}()
}

// retentionSweep trims, on each cell held here, the records older than
// the retention.
func (d *Daemon) retentionSweep(ctx context.Context) {
	now := time.Now()
	held := map[string]bool{}
	for _, c := range d.cellEntries() {
		h := c.live()
		if h == nil {
			continue
		}
		held[h.name] = true
		if err := d.retain(ctx, h, now); err != nil && ctx.Err() == nil {
			d.log.Warn("retention: could not trim (the next sweep tries again)", "cell", h.name, "err", err)
		}
	}
	d.ret.mu.Lock()
	for name := range d.ret.cells {
		if !held[name] {
			delete(d.ret.cells, name)
		}
	}
	d.ret.mu.Unlock()
}

// retain is the sweep of one held cell.
func (d *Daemon) retain(ctx context.Context, h *holding, now time.Time) error {
	cutoff := now.Add(-d.cfg.Retention).UnixMilli()
	d.ret.mu.Lock()
	if d.ret.cells == nil {
		d.ret.cells = map[string]*retainState{}
	}
	st := d.ret.cells[h.name]
	d.ret.mu.Unlock()
	if st != nil && st.lease == h.lease {
		switch {
		case st.ts != 0 && st.ts > cutoff:
			return nil // the first record served has not expired
		case st.ts == 0:
			if h.log.Head().NextPos <= st.tail {
				return nil // nothing appended since the log ended at first
			}
			if st.seen == 0 {
				st.seen = now.UnixMilli() // a record appeared: it is no younger than this
				return nil
			}
			if st.seen > cutoff {
				return nil
			}
		}
	} else {
		before, err := d.trimPoint(ctx, h.name, h, false)
		if err != nil {
			return err
		}
		st = &retainState{lease: h.lease, first: max(before, 1)}
	}
	// Read on from st.first to the first record younger than the cutoff.
	h.c.begin()
	defer h.c.end()
	for {
		recs, err := h.log.Read(ctx, st.first-1, 1000, false)
		if errors.Is(err, replication.ErrCompacted) {
			// deed gc deleted files from here: go on from the snapshot.
			snap, serr := replication.LatestSnapshot(ctx, d.b, h.name)
			if serr != nil || snap == nil || snap.NextPos <= st.first {
				return err
			}
			st.first = snap.NextPos
			continue
		}
		if err != nil {
			return err
		}
		i := 0
		// A record without a timestamp (written before them) never expires.
		for i < len(recs) && recs[i].TS != 0 && recs[i].TS <= cutoff {
			i++
		}
		if i < len(recs) {
			st.first, st.ts, st.tail, st.seen = recs[i].Pos, recs[i].TS, 0, 0
			break
		}
		if len(recs) == 0 {
			st.ts, st.tail, st.seen = 0, st.first, 0
			break
		}
		st.first = recs[len(recs)-1].Pos + 1
	}
	d.ret.mu.Lock()
	d.ret.cells[h.name] = st
	d.ret.mu.Unlock()
	cur, err := d.trimPoint(ctx, h.name, h, false)
	if err != nil || st.first <= max(cur, 1) {
		return err
	}
	now2, err := replication.RaiseTrim(ctx, d.b, h.name, st.first)
	if err != nil {
		return err
	}
	d.noteTrim(h.name, now2, h.lease, time.Now())
	d.scheduleTrimDelete(h.name, now2)
	return nil
}
