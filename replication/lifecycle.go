package replication

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/deedkit/deed/errcode"
)

// state is where a log is in its life. Open returns a log in stateOpen;
// every later change goes through moveLocked, which holds the only list of
// the transitions a log can make:
//
//	open        → closing (Close), abandoned (Abandon)
//	closing     → closed (the attempt sealed the chain end, or found it
//	              fenced), closeFailed (it failed), abandoning (Abandon)
//	closeFailed → closing (Close again), abandoned (Abandon)
//	abandoning  → abandoned (the attempt under way ends)
//
// Appends are accepted only while open. closed and abandoned are final: a
// later Close returns the outcome that ended the log.
type state int

const (
	stateOpen        state = iota
	stateClosing           // a Close attempt is under way; other Close calls wait for it
	stateCloseFailed       // the last Close attempt failed (an outage, a deadline): Close tries again
	stateClosed            // a Close attempt sealed the chain end (or found it fenced)
	stateAbandoning        // Abandon came while a Close attempt ran: that attempt ends it
	stateAbandoned         // Abandon ended the log; nothing is sealed
)

var stateNames = [...]string{"open", "closing", "close-failed", "closed", "abandoning", "abandoned"}

func (s state) String() string { return stateNames[s] }

// transitions lists, for each state, the states it may move to.
var transitions = map[state][]state{
	stateOpen:        {stateClosing, stateAbandoned},
	stateClosing:     {stateClosed, stateCloseFailed, stateAbandoning},
	stateCloseFailed: {stateClosing, stateAbandoned},
	stateAbandoning:  {stateAbandoned},
}

// moveLocked moves the log to state to; l.mu must be held. A transition
// the diagram above does not have is a bug in this package: it ends this
// log, not the process (one cell's bug must not stop a node's other
// cells). The log is then abandoned with the returned error (DEED-E011,
// saying what to do): appends are refused, Close returns it, nothing more
// is written or sealed (the cell's next owner seals the chain, as after
// Abandon). Each such error is logged and counted (InternalErrors). The
// caller calls forget once it has released l.mu.
func (l *Log) moveLocked(to state) error {
	for _, ok := range transitions[l.state] {
		if ok == to {
			l.state = to
			l.wakeLocked() // a waiting reader reads again, where the cell is now
			return nil
		}
	}
	err := errcode.Errorf(errcode.CodeUnavailable, "log %s epoch %d: %w, no transition from %s to %s: "+
		"the log has ended on this node and wrote nothing more; release the cell (or restart the node) to claim it afresh",
		l.s.cell, l.epoch, ErrInternal, l.state, to)
	internalErrors.Add(1)
	l.s.cfg.logger.Error("log ended by an internal error (a bug in deed: please report it)", "cell", l.s.cell, "epoch", l.epoch, "err", err)
	l.state = stateAbandoned
	l.wakeLocked()
	if l.err == nil {
		l.err = err
	}
	c := l.closerLocked()
	c.err = err
	if c.stop != nil {
		c.stop() // a Close attempt under way stops
	}
	if l.w != nil {
		l.w.cancel() // the writer settles its queue with l.err and exits
	}
	return err
}

// ErrInternal is in the error of a log ended by an impossible state
// transition (errors.Is). Such a log has nothing left to seal: its holder
// releases the lease without sealing, as a crashed holder leaves it, and
// the next owner seals the chain when it opens its log.
var ErrInternal = errors.New("internal error")

// internalErrors counts the logs ended by an impossible state transition.
var internalErrors atomic.Uint64

// InternalErrors is the number of logs this process ended because of an
// impossible state transition (a bug in this package); the daemon exports
// it as deed_log_internal_errors_total. Each ended only its own log.
func InternalErrors() uint64 { return internalErrors.Load() }

// final reports whether the log has ended for good (closed or abandoned).
func (s state) final() bool { return s == stateClosed || s == stateAbandoned }

// attempting reports whether a Close attempt is under way.
func (s state) attempting() bool { return s == stateClosing || s == stateAbandoning }

// closer is the bookkeeping of Close attempts, under Log.mu.
type closer struct {
	done chan struct{}      // made by each Close attempt; closed when it ends
	err  error              // the last Close attempt's outcome
	stop context.CancelFunc // cuts the attempt under way short (Abandon)
}

// closerLocked returns the log's Close bookkeeping, made by the first
// Close or Abandon: an open log keeps none (a daemon holds one log per
// cell). l.mu must be held.
func (l *Log) closerLocked() *closer {
	return &l.extrasLocked().c
}

// Close waits for queued appends, then seals the log's own chain end (a
// seal at its next slot, in its own epoch), so that the release that
// follows lets the next claimer start without walking. It does not release
// the lease: the caller does, after Close. If ctx ends first, pending
// appends fail (DEED-E012 for one in flight) and the chain is left for the
// next claimer to seal; Close may be called again.
func (l *Log) Close(ctx context.Context) error {
	l.mu.Lock()
	for l.state.attempting() {
		done := l.closerLocked().done
		l.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("close log %s: %w", l.s.cell, ctx.Err())
		}
		l.mu.Lock()
	}
	if l.state.final() {
		err := l.closerLocked().err
		l.mu.Unlock()
		return err
	}
	// The first attempt, or a retry after one that failed (a store outage,
	// a deadline): appends stay refused either way.
	if err := l.moveLocked(stateClosing); err != nil {
		l.mu.Unlock()
		forget(l)
		return err
	}
	l.closerLocked().done = make(chan struct{})
	l.kickLocked()
	rebuild := l.stopRebuildLocked()
	l.mu.Unlock()
	if rebuild != nil {
		select {
		case <-rebuild:
		case <-ctx.Done(): // it ends on its own soon: its context is cancelled
		}
	}
	err := l.close(ctx)
	l.mu.Lock()
	l.closerLocked().err, l.closerLocked().stop = err, nil
	var merr error
	switch {
	case l.state == stateAbandoning:
		merr = l.moveLocked(stateAbandoned)
	case err == nil:
		merr = l.moveLocked(stateClosed)
	default:
		merr = l.moveLocked(stateCloseFailed)
	}
	if merr != nil {
		err = merr
	}
	final, done := l.state.final(), l.closerLocked().done
	l.mu.Unlock()
	close(done)
	if final {
		forget(l)
	}
	return err
}

// Abandon ends the log at once, without sealing it and without sending a
// request: appends still queued fail with the lease's error, and one whose
// PUT is in flight is cut off and reports an unknown outcome (DEED-E012;
// the record may still become durable, as after any lost response).
//
// It is for an owner that has lost its lease, typically a node that fenced
// because it cannot reach the store: sealing the chain end is then only a
// courtesy to the next owner, which seals it itself, and trying would cost
// up to a timeout per log. A Close already under way is cut short the same
// way and returns the abandonment error.
func (l *Log) Abandon() {
	l.mu.Lock()
	if l.err == nil {
		err := l.lease.Check()
		if err == nil {
			err = errcode.Errorf(errcode.CodeBadRequest, "log %s epoch %d: %w", l.s.cell, l.epoch, errAbandoned)
		}
		l.err = err
	}
	var stopClose context.CancelFunc
	settle := false
	switch l.state {
	case stateClosing: // the attempt under way ends the log
		if l.moveLocked(stateAbandoning) == nil {
			stopClose = l.closerLocked().stop
		} else {
			settle = true
		}
	case stateOpen, stateCloseFailed:
		if l.moveLocked(stateAbandoned) == nil {
			l.closerLocked().err = l.err
		}
		settle = true
	}
	cancel, stopped := l.writerLocked()
	rebuild := l.stopRebuildLocked()
	l.mu.Unlock()
	if stopClose != nil {
		stopClose()
	}
	if cancel != nil {
		cancel()
		<-stopped
	}
	if rebuild != nil {
		<-rebuild // its context is cancelled: it ends at its next request
	}
	if settle {
		forget(l)
	}
}

// close is one Close attempt: drain the writer, then seal the chain end.
func (l *Log) close(ctx context.Context) error {
	ctx, stopClose := context.WithCancel(ctx)
	defer stopClose()
	// Closing stops new appends, so once the writer (if one runs) has
	// drained the queue and exited, none starts again.
	l.mu.Lock()
	l.closerLocked().stop = stopClose
	var handed []*pending
	if brokenHandoffAck {
		handed = l.handOverLocked()
	}
	cancel, stopped := l.writerLocked()
	abandoned, aerr := l.state == stateAbandoning, l.err
	l.mu.Unlock()
	if abandoned { // Abandon came between Close marking the log closing and here
		return aerr
	}
	if stopped != nil {
		select {
		case <-stopped:
		case <-ctx.Done():
			cancel()
			<-stopped
			return errcode.Wrap(errcode.Errorf(errcode.CodeUnavailable, "%w", ctx.Err()), "close log %s epoch %d: appends not drained", l.s.cell, l.epoch)
		}
	}
	l.mu.Lock()
	werr, next, pos, abandoned, ts := l.err, l.next, l.nextPos, l.state == stateAbandoning, l.lastTS
	l.mu.Unlock()
	if brokenHandoffAck {
		ackHandedOver(handed, l.epoch, next, pos)
	}
	if abandoned {
		return werr
	}
	if werr != nil && errcode.CodeOf(werr) == errcode.CodeSuperseded {
		return nil // a newer epoch sealed us: the chain end is fenced already
	}
	// After a write whose outcome was never learned (the writer was cut off
	// with its PUT in flight), the slot at next may hold that write: the
	// seal then goes right after it. If it lands only after the seal, it is
	// refused there, and it was reported as unknown, never acknowledged.
	unknown := werr != nil && errcode.CodeOf(werr) == errcode.CodeAmbiguous
	for {
		key := SlotKey(l.s.cell, l.epoch, next)
		body, err := Encode(&File{Kind: KindSeal, Epoch: l.epoch, TxID: next, Token: l.lease.Token(), Pos: pos, By: l.epoch, TS: ts})
		if err != nil {
			return err
		}
		theirs, err := l.s.create(ctx, key, body)
		if err != nil {
			return errcode.Wrap(err, "close log %s epoch %d: seal", l.s.cell, l.epoch)
		}
		if theirs == nil {
			// The release records it, so that the next epoch reads this
			// seal instead of listing and walking the log (Record.End).
			l.lease.NoteEnd(uint64(next), uint64(pos), ts)
			l.s.cfg.logger.Info("log closed and sealed", "cell", l.s.cell, "epoch", l.epoch, "key", key)
			return nil
		}
		if unknown && theirs.Kind == KindRecords && theirs.Epoch == l.epoch && theirs.Token == l.lease.Token() {
			unknown = false // one write at most was in flight
			next, pos, ts = next+1, theirs.NextPos(), max(ts, theirs.TS)
			continue
		}
		if ferr := l.fenced(key, theirs); errcode.CodeOf(ferr) != errcode.CodeSuperseded {
			return errcode.Wrap(ferr, "close log %s epoch %d: seal", l.s.cell, l.epoch)
		}
		return nil
	}
}
