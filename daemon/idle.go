package daemon

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/deedkit/deed/errcode"
)

// Idle release: a cell nobody has used for Config.IdleRelease goes home
// (sealed and released through retire, the one graceful end of a cell), and
// above Config.MaxCells the least recently used cells go first. Its next
// request claims it again, from this node or any other; a claim of a cell
// this node released itself is one conditional PUT on the ETag its release
// wrote.
//
// The sweep's rule, so that 50,000 cells going idle together do not hit the
// store at once: one sweep every min(IdleRelease/4, 1 min) (every minute
// when only MaxCells is set), retiring at most idleSweepBatch cells, oldest
// first, idleSweepConcurrency at a time (each retire is a seal PUT and a
// release PUT). Cells left over wait for the next sweep; only while the node
// holds more than MaxCells does the next sweep follow at once, as long as
// the last one released something. A claim that takes the node above
// MaxCells is served as usual and wakes the sweep, which evicts in the
// background: an unrelated request never waits for another cell's retire,
// and is never refused because of the bound.
const (
	// DefaultIdleRelease is `deed run`'s --idle-release: long enough that a
	// cell in any regular use (every few minutes) stays held and pays no
	// re-claim, short enough that cells a client has left go home within
	// minutes instead of costing memory, drain time and a TTL-long wait on
	// a crash until the node shuts down.
	DefaultIdleRelease = 10 * time.Minute
	// idleSweepBatch bounds the cells one sweep retires.
	idleSweepBatch = 2000
	// idleSweepConcurrency bounds the retires in flight at once.
	idleSweepConcurrency = 8
	// maxIdleSweepEvery is the longest pause between sweeps.
	maxIdleSweepEvery = time.Minute
	// minIdleSweepEvery keeps a tiny IdleRelease from spinning the sweep.
	minIdleSweepEvery = 10 * time.Millisecond
)

// The reasons of deed_cells_released_total.
const (
	releasedIdle     = "idle"
	releasedMaxCells = "max_cells"
)

// idleSweeper is the goroutine that releases idle cells, and what it keeps
// between sweeps.
type idleSweeper struct {
	every  time.Duration
	nudge  chan struct{} // a claim took the node above MaxCells
	cancel context.CancelFunc
	done   chan struct{}
	// failed are the cells whose retire by the sweep failed (a store
	// outage): their appends stay refused until a retire succeeds, so they
	// are retried first at the next sweep, whatever their lastUsed (the
	// refused appends keep stamping it). Only the sweep goroutine uses it.
	failed map[string]string // cell → reason
}

// idleSweepEvery is the pause between sweeps for IdleRelease d.
func idleSweepEvery(d time.Duration) time.Duration {
	if d <= 0 {
		return maxIdleSweepEvery
	}
	return min(max(d/4, minIdleSweepEvery), maxIdleSweepEvery)
}

// startIdleSweep starts the sweep when IdleRelease or MaxCells is set.
func (d *Daemon) startIdleSweep(ctx context.Context) {
	if d.cfg.IdleRelease <= 0 && d.cfg.MaxCells <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &idleSweeper{every: idleSweepEvery(d.cfg.IdleRelease), nudge: make(chan struct{}, 1), cancel: cancel,
		done: make(chan struct{}), failed: map[string]string{}}
	d.idle = s
	go d.idleLoop(ctx, s)
}

// stopIdleSweep stops the sweep and waits for the retires it started (each
// bounded by the TTL), so that the drain finds no cell half-retired.
func (d *Daemon) stopIdleSweep() {
	if s := d.idle; s != nil {
		s.cancel()
		<-s.done
	}
}

// nudgeIdleSweep wakes the sweep when the node holds more than MaxCells.
func (d *Daemon) nudgeIdleSweep() {
	s := d.idle
	if s == nil || d.cfg.MaxCells <= 0 || d.countHeld() <= d.cfg.MaxCells {
		return
	}
	select {
	case s.nudge <- struct{}{}:
	default:
	}
}

func (d *Daemon) idleLoop(ctx context.Context, s *idleSweeper) {
	defer close(s.done)
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.nudge:
		}
		for d.sweepIdle(ctx, s) && ctx.Err() == nil {
		}
	}
}

// begin marks a request using the cell's log as in flight; end, when it is
// done, stamps lastUsed again. So a cell is idle only when no request is in
// flight and none ended within IdleRelease, however long one ran.
func (c *cell) begin() {
	c.inflight.Add(1)
	c.lastUsed.Store(time.Now().UnixNano())
}

func (c *cell) end() {
	c.lastUsed.Store(time.Now().UnixNano())
	c.inflight.Add(-1)
}

// idleCandidate is a held cell as one sweep saw it.
type idleCandidate struct {
	name     string
	c        *cell
	lastUsed int64  // UnixNano
	busy     bool   // a request in flight, or the cell's lock taken
	retry    string // the reason of a retire of the sweep's that failed, to be retried
}

// idleRetire is one cell a sweep retires, and why.
type idleRetire struct {
	idleCandidate
	reason string
}

// planIdleSweep picks, from the held cells, those to retire now: first
// those whose retire failed before (their appends are refused until it
// succeeds, so their use does not count), then the idle ones (no request
// since idle; 0 means no idle release), oldest first, then the least
// recently used of the rest while more than maxCells (0: no bound) would
// stay held; no other busy cell, at most batch in all.
func planIdleSweep(held []idleCandidate, now time.Time, idle time.Duration, maxCells, batch int) []idleRetire {
	var out []idleRetire
	var rest []idleCandidate
	for _, h := range held {
		if h.retry != "" && len(out) < batch {
			out = append(out, idleRetire{h, h.retry})
		} else if !h.busy && h.retry == "" {
			rest = append(rest, h)
		}
	}
	slices.SortFunc(rest, func(a, b idleCandidate) int { return cmp.Compare(a.lastUsed, b.lastUsed) })
	staying := len(held) - len(out)
	for _, h := range rest {
		if len(out) >= batch {
			break
		}
		switch {
		case idle > 0 && now.Sub(time.Unix(0, h.lastUsed)) >= idle:
			out = append(out, idleRetire{h, releasedIdle})
		case maxCells > 0 && staying > maxCells:
			out = append(out, idleRetire{h, releasedMaxCells})
		default:
			return out // sorted: the rest are newer still
		}
		staying--
	}
	return out
}

// heldCandidates lists the cells held here with a live lease, as the sweep
// sees them.
func (d *Daemon) heldCandidates(s *idleSweeper) []idleCandidate {
	cells := d.cellEntries()
	out := make([]idleCandidate, 0, len(cells))
	for name := range s.failed {
		// Dropped meanwhile (the node fenced, the lease ended): nothing
		// left to retry.
		d.mu.Lock()
		_, ok := d.cells[name]
		d.mu.Unlock()
		if !ok {
			delete(s.failed, name)
		}
	}
	for _, c := range cells {
		h := idleCandidate{name: c.name, c: c, lastUsed: c.lastUsed.Load(), retry: s.failed[c.name]}
		// A cell whose lock is taken is being claimed, retired or
		// released: busy, and looked at again next time.
		if !c.mu.TryLock() {
			h.busy, h.retry = true, "" // a failed retire is retried next time
			out = append(out, h)
			continue
		}
		live := c.lease != nil && c.lease.Err() == nil
		releasing := c.releasing
		c.mu.Unlock()
		if !live || (h.retry != "" && !releasing) {
			// Its lease ended, or the cell was released and claimed
			// again since the retire failed: that retire is moot.
			delete(s.failed, c.name)
			h.retry = ""
		}
		if !live {
			continue
		}
		h.busy = c.inflight.Load() > 0
		out = append(out, h)
	}
	return out
}

// sweepIdle runs one sweep and reports whether another should follow at
// once: the node still holds more than MaxCells and this sweep made
// progress.
func (d *Daemon) sweepIdle(ctx context.Context, s *idleSweeper) bool {
	if !d.ready() {
		return false
	}
	cands := d.heldCandidates(s)
	plan := planIdleSweep(cands, time.Now(), d.cfg.IdleRelease, d.cfg.MaxCells, idleSweepBatch)
	if len(plan) == 0 {
		return false
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		released = map[string]int{}
		failed   = map[string]string{}
	)
	sem := make(chan struct{}, idleSweepConcurrency)
	for _, p := range plan {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ok, err := d.retireIdle(ctx, p)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case ok:
				released[p.reason]++
			case err != nil:
				failed[p.name] = p.reason
			}
		})
	}
	wg.Wait()
	for _, p := range plan {
		delete(s.failed, p.name)
	}
	for name, reason := range failed {
		s.failed[name] = reason
	}
	n := released[releasedIdle] + released[releasedMaxCells]
	if n > 0 || len(failed) > 0 {
		d.log.Info("released idle cells", "idle", released[releasedIdle], "max_cells", released[releasedMaxCells], "failed", len(failed), "held", len(cands)-n)
	}
	// Counted from the live leases the sweep saw, less those it released:
	// a retired cell's entry stays in d.cells until its lease's end has
	// been processed, and counting it would retire one cell too many. A
	// cell claimed since then wakes the sweep itself.
	return n > 0 && d.cfg.MaxCells > 0 && len(cands)-n > d.cfg.MaxCells
}

// retireIdle retires one planned cell unless a request used it since it
// was planned (that request's append would only have been retried). A
// retire the sweep started runs to its end, within one TTL, even when the
// sweep is stopped. It reports whether the cell was released, and the
// error of a retire that failed and is to be retried.
func (d *Daemon) retireIdle(ctx context.Context, p idleRetire) (bool, error) {
	if p.retry == "" && (p.c.inflight.Load() > 0 || p.c.lastUsed.Load() != p.lastUsed) {
		return false, nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.TTL)
	defer cancel()
	rec, err := d.retire(rctx, p.name, p.reason)
	switch {
	case errcode.CodeOf(err) == errcode.CodeNotHolder:
		return false, nil // its lease ended meanwhile: nothing to release
	case err != nil:
		d.log.Warn("idle release failed; appends to the cell are refused until a later sweep retries it", "cell", p.name, "reason", p.reason, "err", err)
		return false, err
	}
	d.m.cellsReleased.WithLabelValues(p.reason).Inc()
	// A cell this node released on its own is as likely as any to be
	// wanted again, through whichever node routing picks.
	d.pushReleaseHint(p.name)
	detail := "no request for " + d.cfg.IdleRelease.String()
	if p.reason == releasedMaxCells {
		detail = "least recently used, above the max-cells bound"
	}
	d.events.add(Event{Kind: "idle_release", Cell: p.name, Detail: detail})
	d.log.Debug("cell released", "cell", p.name, "epoch", rec.Epoch, "reason", p.reason)
	return true, nil
}
