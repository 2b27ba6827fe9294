package simulation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// Handoffs: moves, drains and idle releases, as the daemon makes them.
//
// Each one ends a held cell with the daemon's retire (daemon.retire): the
// requests that come for the cell meanwhile wait; the log is closed, which
// writes the appends already queued and seals the chain end; then the
// record is released. An append that met the retire — it waited, or met
// the closing log (refused before anything was written) — is routed again
// once the retire is over, to the new holder or to the cell's preferred
// node, which claims it; the client sees one answer, never a refusal
// caused by the move. A move then has the preferred other live node claim
// the cell; a drain retires every cell of a node, has each claimed by its
// preferred live node and keeps the node from claiming for a while; an
// idle release retires a cell nobody used for a while and leaves it free
// until its next append.
//
// The order is the daemon's: seal, then release (-releasefirst reverses
// it, which the protocol tolerates: the next owner seals the chain itself,
// and an append still in flight either lands before that seal and is kept,
// or meets it and is refused without being written).

// maxRoutes bounds how often one append is routed again after a handoff
// (the daemon's maxRetiredRetries, plus the first try).
const maxRoutes = 5

// route picks the incarnation and log that serve a client's request for
// cell, as the daemon's routing does: the holder, after waiting out a
// retire of its log under way; for a cell a handoff left free, the
// preferred node, after it claimed the cell. nil when nobody holds it.
func (w *world) route(ctx context.Context, n *simNode, cell string) (*incarnation, *cellLog) {
	for range maxRoutes {
		inc, cl := w.holder(n, cell)
		if cl == nil {
			if !w.claimFree(ctx, cell) {
				return inc, nil
			}
			continue
		}
		inc.mu.Lock()
		retiring := cl.retiring
		inc.mu.Unlock()
		if retiring == nil {
			return inc, cl
		}
		w.h.count("request waited for a handoff")
		select {
		case <-retiring:
		case <-ctx.Done():
			return inc, nil
		}
	}
	return nil, nil
}

// retiredUnder reports whether err refused a request on cl because a
// handoff retired cl under it: the log was closing, or its lease released,
// both refusals before anything is sent. It waits for the retire to end,
// and is true if it sealed and released (daemon: holding.retiredUnder); the
// request is then routed again.
func (inc *incarnation) retiredUnder(ctx context.Context, cl *cellLog, err error) bool {
	if !errors.Is(err, replication.ErrClosed) && errcode.CodeOf(err) != errcode.CodeReleased {
		return false
	}
	inc.mu.Lock()
	retiring := cl.retiring
	inc.mu.Unlock()
	if retiring == nil {
		return false // an operator's release, a stop: refused, as before
	}
	select {
	case <-retiring:
	case <-ctx.Done():
		return false
	}
	inc.mu.Lock()
	defer inc.mu.Unlock()
	return cl.retired
}

// retire ends inc's hold on cell gracefully, as daemon.retire does: seal
// (Close writes the appends queued, then seals the chain end), then
// release. A retire that fails leaves the cell held, its log refusing
// appends, until a later retire (or release) succeeds, as in the daemon.
func (w *world) retire(ctx context.Context, inc *incarnation, cell, reason string) bool {
	if !inc.begin(cell) {
		return false
	}
	defer inc.end(cell)
	inc.mu.Lock()
	cl := inc.logs[cell]
	if cl == nil || cl.lease.Err() != nil {
		// Not held here (any more): the daemon has dropped a cell whose
		// lease ended, and refuses to retire it.
		inc.mu.Unlock()
		return false
	}
	done := make(chan struct{})
	cl.retiring = done
	inc.mu.Unlock()
	var cerr, rerr error
	if w.releaseFirst {
		rerr = cl.lease.Release(ctx)
		cerr = cl.log.Close(ctx)
	} else if cerr = cl.log.Close(ctx); cerr == nil {
		rerr = cl.lease.Release(ctx)
	}
	ok := cerr == nil && rerr == nil
	inc.mu.Lock()
	cl.retired = ok
	if ok && inc.logs[cell] == cl {
		delete(inc.logs, cell)
	}
	if !ok {
		cl.retiring = nil // a later retire tries again
	}
	inc.mu.Unlock()
	close(done)
	w.h.logf("%s %s e%d by %s: close %v, release %v", reason, cell, cl.lease.Epoch(), inc.client, shortErr(cerr), shortErr(rerr))
	if !ok {
		reason += " failed"
	}
	w.h.count(reason)
	if ok {
		w.mu.Lock()
		w.free[cell] = true
		w.mu.Unlock()
	}
	return ok
}

// move retires cell on its holder and has the preferred other live node
// claim it. With s.burst, appends are in flight when the retire begins:
// one whose PUT takes s.lat, then s.burst more queued behind it.
func (w *world) move(ctx context.Context, i int, n *simNode, cell string, s step) {
	inc := w.live(n, cell)
	if inc == nil {
		return
	}
	if s.burst > 0 {
		w.mem.Inject(fakes3.Rule{Client: inc.client, Op: fakes3.OpPut, KeyPrefix: replication.LogPrefix(cell), Latency: s.lat, Times: 1})
		for k := range 1 + s.burst {
			if k == 1 {
				time.Sleep(5 * time.Millisecond) // the first one's PUT is on its way
			}
			w.ops.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				w.append(ctx, inc.n, cell, fmt.Sprintf("s%d.m%d", i, k))
			})
		}
		time.Sleep(5 * time.Millisecond) // the others are queued behind it
	}
	if !w.retire(ctx, inc, cell, "move") {
		return
	}
	if to := w.preferred(cell, inc.n); to != nil {
		w.claim(ctx, to, cell, false)
	}
}

// drain retires every cell n holds, in parallel, and has each claimed by
// its preferred live node; n claims nothing for s.dur (its node lease says
// it drains meanwhile).
func (w *world) drain(ctx context.Context, n *simNode, s step) {
	inc := n.current()
	if inc == nil {
		return
	}
	n.mu.Lock()
	n.drainUntil = time.Now().Add(s.dur)
	n.mu.Unlock()
	inc.node.SetDraining(true)
	w.window(s.dur, func() { inc.node.SetDraining(false) })
	inc.mu.Lock()
	var cells []string
	for cell := range inc.logs {
		cells = append(cells, cell)
	}
	inc.mu.Unlock()
	slices.Sort(cells)
	w.h.logf("drain %s: %d cells", inc.client, len(cells))
	var wg sync.WaitGroup
	for _, cell := range cells {
		wg.Go(func() {
			if !w.retire(ctx, inc, cell, "drain") {
				return
			}
			if to := w.preferred(cell, n); to != nil {
				w.claim(ctx, to, cell, false)
			}
		})
	}
	wg.Wait()
}

// idle retires cell on its holder if no append or read went through its
// log for s.dur. The cell stays free until its next append.
func (w *world) idle(ctx context.Context, n *simNode, cell string, s step) {
	inc := w.live(n, cell)
	if inc == nil {
		return
	}
	if cl := inc.log(cell); cl == nil || time.Duration(time.Now().UnixNano()-cl.lastUsed.Load()) < s.dur {
		return
	}
	w.retire(ctx, inc, cell, "idle release")
}

// live is the running incarnation that holds cell with a lease still
// valid — n's if it does, else the first one — where the daemon's retire
// would find the cell held; nil if none does.
func (w *world) live(n *simNode, cell string) *incarnation {
	for _, m := range append([]*simNode{n}, w.nodes...) {
		if inc := m.current(); inc != nil {
			if cl := inc.log(cell); cl != nil && cl.lease.Err() == nil {
				return inc
			}
		}
	}
	return nil
}

// claimFree has the preferred live node claim cell if a handoff left it
// free; false if it was not free.
func (w *world) claimFree(ctx context.Context, cell string) bool {
	w.mu.Lock()
	free := w.free[cell]
	w.mu.Unlock()
	if !free {
		return false
	}
	to := w.preferred(cell, nil)
	if to == nil {
		return false
	}
	w.claim(ctx, to, cell, false)
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.free[cell] // claimed (by it, or by someone else meanwhile)
}

// preferred is cell's preferred node among the running, not draining
// nodes other than except: rendezvous hashing, as the daemon places cells
// (all weights 1). nil when there is none.
func (w *world) preferred(cell string, except *simNode) *simNode {
	var best *simNode
	var score uint64
	for _, m := range w.nodes {
		if m == except || m.draining() || m.current() == nil {
			continue
		}
		if s := draw(0, "place", m.name, cell); best == nil || s > score {
			best, score = m, s
		}
	}
	return best
}

// draining reports whether the node drains: it claims nothing meanwhile.
func (n *simNode) draining() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return time.Now().Before(n.drainUntil)
}
