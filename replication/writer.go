package replication

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
)

// writer is the log's writer goroutine and the appends queued for it,
// under Log.mu. The goroutine runs only while there is something to
// commit: Append starts it when it is not running, and it exits once the
// queue has stayed empty for writerLinger, so an idle log holds no
// goroutine. The whole writer (Log.w) is made when it starts and dropped
// when it stops, so an idle log keeps none of it.
type writer struct {
	queue   []*pending         // appends waiting for the writer
	ctx     context.Context    // the running writer's; cancelled by Close on timeout, and by Abandon
	cancel  context.CancelFunc // cancels ctx
	stopped chan struct{}      // closed when the running writer exits
	kick    chan struct{}      // wakes a lingering writer: an append, or Close
	// deferred holds the conditional appends taken off the queue because
	// they would not get the position they name: their refusal waits for
	// the commit taken before them and, past the log's end, for proof that
	// the end is the cell's (settleDeferred).
	deferred []*pending
}

// Append adds record to the log and returns once it is durable in the
// bucket, that is once the transaction file carrying it — and every slot
// before it — was written. Records that arrive while a PUT is in flight go
// together in the next file.
//
// If the log's slot turns out to hold a seal or tombstone, a newer epoch
// has fenced this one: the lease ends as superseded and this append, and
// every one queued behind it, fails with DEED-E021. If ctx ends while the
// record is queued it is not written and the error wraps ctx's; if it ends
// while the record's PUT is in flight, the outcome is unknown (DEED-E012):
// the record may still become durable.
func (l *Log) Append(ctx context.Context, lease *owner.Lease, record []byte) (Result, error) {
	return l.AppendWith(ctx, lease, record, AppendOptions{})
}

// AppendWith is Append with an idempotency key or a position condition
// (see AppendOptions and AppendBatch).
func (l *Log) AppendWith(ctx context.Context, lease *owner.Lease, record []byte, opts AppendOptions) (Result, error) {
	b, err := l.AppendBatch(ctx, lease, [][]byte{record}, opts)
	if err != nil {
		return Result{}, err
	}
	return Result{Epoch: b.Epoch, TxID: b.TxID, Pos: b.FirstPos, FirstPos: b.TxPos, Count: b.TxCount, TS: b.TS, Replayed: b.Replayed}, nil
}

// enqueue queues p for the writer and waits for its outcome, as Append
// describes.
func (l *Log) enqueue(ctx context.Context, p *pending) (BatchResult, error) {
	l.mu.Lock()
	switch {
	case l.err != nil:
		err := l.notSent(l.err)
		l.mu.Unlock()
		return BatchResult{}, err
	case l.state != stateOpen:
		l.mu.Unlock()
		return BatchResult{}, errcode.Errorf(errcode.CodeBadRequest, "append to %s epoch %d: %w", l.s.cell, l.epoch, ErrClosed)
	}
	if p.match != 0 && brokenStaleMatch && p.match != l.nextPos {
		// The broken rule: the condition judged against the chain's end
		// as it is now, not where the record will actually go.
		next := l.nextPos
		l.mu.Unlock()
		return BatchResult{}, mismatch(l.s.cell, p.match, next)
	}
	if p.key != "" {
		l.keysLocked().flight[p.key] = p
	}
	if l.w == nil {
		l.startLocked()
	} else {
		l.kickLocked()
	}
	l.w.queue = append(l.w.queue, p)
	l.mu.Unlock()
	select {
	case o := <-p.done:
		return o.res, o.err
	case <-ctx.Done():
	}
	l.mu.Lock()
	if !p.taken {
		// A writer that stopped (the log failed) settled its queue: p
		// has its outcome and nothing is left to remove. A deferred
		// conditional append (settleDeferred) is not written either.
		if l.w != nil {
			l.w.queue = l.dropLocked(l.w.queue, p, ctx)
			l.w.deferred = l.dropLocked(l.w.deferred, p, ctx)
		}
		l.mu.Unlock()
		return BatchResult{}, fmt.Errorf("append to %s: not written: %w", l.s.cell, ctx.Err())
	}
	l.mu.Unlock()
	select {
	case o := <-p.done: // decided meanwhile
		return o.res, o.err
	default:
	}
	return BatchResult{}, errcode.Errorf(errcode.CodeAmbiguous, "append to %s: outcome unknown, the record may still become durable: %w", l.s.cell, ctx.Err())
}

// dropLocked removes p from q, settling it as not written because ctx
// ended; l.mu must be held.
func (l *Log) dropLocked(q []*pending, p *pending, ctx context.Context) []*pending {
	for i, o := range q {
		if o == p {
			l.settleLocked(p, outcome{err: fmt.Errorf("append to %s: not written: %w", l.s.cell, ctx.Err())})
			return append(q[:i], q[i+1:]...)
		}
	}
	return q
}

// startLocked starts the writer goroutine; l.mu must be held. Its context
// carries none of Open's or Append's values: it outlives both.
func (l *Log) startLocked() {
	ctx, cancel := context.WithCancel(context.Background())
	l.w = &writer{ctx: ctx, cancel: cancel, stopped: make(chan struct{}), kick: make(chan struct{}, 1)}
	go l.run()
}

// queueLocked is the appends waiting for the writer, none while no writer
// runs; l.mu must be held.
func (l *Log) queueLocked() []*pending {
	if l.w == nil {
		return nil
	}
	return l.w.queue
}

// writerLocked is the running writer's cancel func and stopped channel,
// nil while none runs; l.mu must be held.
func (l *Log) writerLocked() (context.CancelFunc, chan struct{}) {
	if l.w == nil {
		return nil, nil
	}
	return l.w.cancel, l.w.stopped
}

// kickLocked wakes the writer if it lingers; l.mu must be held.
func (l *Log) kickLocked() {
	if l.w != nil {
		select {
		case l.w.kick <- struct{}{}:
		default:
		}
	}
}

// stopLocked marks the writer stopped as it exits; l.mu must be held.
func (l *Log) stopLocked() {
	l.w.cancel()
	close(l.w.stopped)
	l.w = nil // an idle log keeps no writer state
}

// writerLinger is how long a writer with nothing to commit waits for the
// next append before it exits. A new writer costs a goroutine start and a
// stack to grow; a client that appends one record at a time comes back
// well within this, so it keeps one warm writer, while a cell that goes
// idle frees its goroutine almost at once.
const writerLinger = 2 * time.Millisecond

// run is the writer: at most one goroutine per log at a time, one PUT in
// flight, slots in strict order. It exits once the queue has stayed empty
// for writerLinger, when the log is closing, or when the log failed; the
// next Append starts a new one.
func (l *Log) run() {
	growStack()
	lingered := false
	for {
		l.mu.Lock()
		if l.err != nil {
			q := l.w.queue
			err := l.notSent(l.err)
			l.stopLocked()
			for _, p := range q {
				l.settleLocked(p, outcome{err: err})
			}
			l.mu.Unlock()
			return
		}
		if len(l.w.queue) == 0 {
			if lingered || l.state != stateOpen {
				l.stopLocked()
				l.mu.Unlock()
				return
			}
			kick, ctx := l.w.kick, l.w.ctx
			l.mu.Unlock()
			t := time.NewTimer(writerLinger)
			select {
			case <-kick:
			case <-t.C:
				lingered = true
			case <-ctx.Done():
				lingered = true
			}
			t.Stop()
			continue
		}
		lingered = false
		batch := l.takeLocked()
		if len(batch) == 0 { // every one refused by its condition
			l.mu.Unlock()
			l.settleDeferred()
			continue
		}
		txid, pos := l.next, l.nextPos
		l.mu.Unlock()
		l.commit(batch, txid, pos)
		l.settleDeferred()
		l.settle(len(batch))
	}
}

// settleDeferred answers the conditional appends that would not get the
// position they name, once what their answer says is proved. A refusal
// (DEED-E044) says the record is not written and names the log's next
// position, and a client takes it as final: a keyed retry so refused
// reads as never written. So it is given only for a position below the
// committed end, which is the cell's whoever holds it now (a newer owner
// writes only past it, and a keyed record there would have been found by
// its key). Hence it waits for the commit taken before it: if that fails
// (the log fenced), the append is refused as the log is (DEED-E021), not
// with a mismatch against records never written. A position past the end
// is what a client names when a newer owner answered it (maybe having
// written this very append, whose answer it lost): the read barrier looks
// at the next slot first; a seal or a tombstone there ends the lease
// (DEED-E021: send it to the holder), an empty slot proves nobody wrote
// past the end, and the refusal names the end. An append whose position
// is the end now is judged again, first in the queue.
func (l *Log) settleDeferred() {
	l.mu.Lock()
	past := false
	for _, p := range l.w.deferred {
		past = past || p.match > l.nextPos
	}
	failed := l.err != nil
	l.mu.Unlock()
	var proof error
	if past && !failed {
		proof = l.barrier(l.w.ctx)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var again []*pending
	for _, p := range l.w.deferred {
		switch {
		case l.err != nil:
			l.settleLocked(p, outcome{err: l.notSent(l.err)})
		case p.match < l.nextPos:
			l.settleLocked(p, outcome{err: mismatch(l.s.cell, p.match, l.nextPos)})
		case p.match == l.nextPos:
			again = append(again, p)
		case proof != nil && l.lease.Err() != nil:
			l.settleLocked(p, outcome{err: l.lease.Err()})
		case proof != nil:
			l.settleLocked(p, outcome{err: errcode.Errorf(errcode.CodeUnavailable, "append to %s: not written: match_pos %d is past this log's end (%d) and that end could not be proved current: %v", l.s.cell, uint64(p.match), uint64(l.nextPos), proof)})
		default:
			l.settleLocked(p, outcome{err: mismatch(l.s.cell, p.match, l.nextPos)})
		}
	}
	clear(l.w.deferred)
	l.w.deferred = l.w.deferred[:0]
	if len(again) > 0 {
		l.w.queue = append(again, l.w.queue...)
	}
}

// maxSettleYields bounds how often settle yields after one commit.
const maxSettleYields = 16

// settle gives the appenders a commit has just acknowledged the chance to
// queue their next records before the writer takes its next batch. Without
// it the first of them to run is taken alone, and the others wait behind
// that PUT for a whole round trip: under a closed loop of N appenders the
// batches alternate between 1 and N−1 records, halving the cell's
// throughput. It only yields the processor (no timer, no sleep) and only
// while the queue is shorter than the last batch and still growing, so an
// append that arrives alone is never delayed by more than a yield.
func (l *Log) settle(last int) {
	prev := -1
	for range maxSettleYields {
		l.mu.Lock()
		n := len(l.w.queue)
		l.mu.Unlock()
		if n >= last || n == prev {
			return
		}
		prev = n
		runtime.Gosched()
	}
}

// takeLocked removes the next group commit from the queue: at least one
// append, then as many as fit the bounds; an append (a batch) is never
// split. A conditional append whose position would not be the one it names
// is settled here, refused unwritten: this is where its position is
// decided, right behind the appends taken before it.
func (l *Log) takeLocked() []*pending {
	n, size, recs := 0, 0, 0
	pos := l.nextPos
	var batch []*pending
	for n < len(l.w.queue) {
		p := l.w.queue[n]
		if p.match != 0 && p.match != pos+Pos(recs) && !brokenStaleMatch {
			if brokenMismatchUnproved {
				l.settleLocked(p, outcome{err: mismatch(l.s.cell, p.match, pos+Pos(recs))})
			} else {
				l.w.deferred = append(l.w.deferred, p)
			}
			l.w.queue = append(l.w.queue[:n], l.w.queue[n+1:]...)
			continue
		}
		d := p.size()
		if len(batch) > 0 && (size+d > l.s.cfg.maxBatchBytes || recs+len(p.recs) > l.s.cfg.maxBatchRecords) {
			break
		}
		size += d
		recs += len(p.recs)
		batch = append(batch, p)
		n++
	}
	rest := copy(l.w.queue, l.w.queue[n:])
	clear(l.w.queue[rest:]) // no stale pointers to settled appends
	l.w.queue = l.w.queue[:rest]
	for _, p := range batch {
		p.taken = true
	}
	return batch
}

// notSent is the error of an append the log refuses, without sending it,
// because the log failed with err. An unknown outcome (DEED-E012) belongs
// to the write that was in flight when the log failed; a record that was
// never sent is not written, and says so (DEED-E011), so that a caller who
// retries what was refused cannot mistake it for a record that may exist.
func (l *Log) notSent(err error) error {
	if errcode.CodeOf(err) != errcode.CodeAmbiguous {
		return err
	}
	return errcode.Errorf(errcode.CodeUnavailable, "append to %s epoch %d: not written: the log stopped after a write of unknown outcome (%v)", l.s.cell, l.epoch, err)
}

// fail settles every append of q with err.
func (l *Log) fail(q []*pending, err error) {
	l.mu.Lock()
	for _, p := range q {
		l.settleLocked(p, outcome{err: err})
	}
	l.mu.Unlock()
}

func (l *Log) setErr(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
}

// commit writes one transaction file at txid and settles its appends.
func (l *Log) commit(batch []*pending, txid TxID, pos Pos) {
	// A lease that ended (released, node fenced, superseded) starts no new
	// write. A write already started is always resolved, never abandoned.
	if err := l.lease.Check(); err != nil {
		l.setErr(err)
		l.fail(batch, err)
		return
	}
	l.mu.Lock()
	ts := max(nowMillis(), l.lastTS) // never below what this epoch, or one it fenced, wrote
	l.mu.Unlock()
	f := &File{Kind: KindRecords, Epoch: l.epoch, TxID: txid, Token: l.lease.Token(), Pos: pos, TS: ts}
	for _, p := range batch {
		if p.key != "" {
			f.Keys = append(f.Keys, TxKey{Key: p.key, First: len(f.Records), Count: len(p.recs)})
		}
		f.Records = append(f.Records, p.recs...)
	}
	key := SlotKey(l.s.cell, l.epoch, txid)
	body, err := Encode(f)
	if err != nil {
		// Nothing was sent; only this batch fails.
		l.fail(batch, err)
		return
	}
	if brokenEarlyAck {
		batch = ackEarly(batch, l.epoch, txid, pos)
	}
	theirs, puts, err := l.s.createCounted(l.w.ctx, key, body)
	if err == nil && theirs != nil {
		err = l.fenced(key, theirs)
	}
	if err != nil {
		l.setErr(err)
		l.fail(batch, err)
		return
	}
	if obs := l.s.cfg.onCommit; obs != nil {
		obs(len(f.Records), puts)
	}
	l.mu.Lock()
	l.next, l.nextPos, l.lastTS = txid+1, f.NextPos(), ts
	l.index = append(l.index, indexEntry{txid: txid, pos: pos})
	if len(l.index) > l.s.cfg.indexLen {
		l.index = append(l.index[:0], l.index[len(l.index)-l.s.cfg.indexLen/2:]...)
	}
	// Waiting readers are woken before any append is answered: a reader
	// that an acknowledged append's client tells to look finds the
	// channel it waited on already closed.
	l.wakeLocked()
	at := pos
	for _, p := range batch {
		res := BatchResult{Epoch: l.epoch, TxID: txid, FirstPos: at, LastPos: at + Pos(len(p.recs)) - 1, TS: ts, TxPos: pos, TxCount: len(f.Records)}
		at += Pos(len(p.recs))
		if p.key != "" {
			l.keysLocked().remember(p.key, p.digest, res, l.s.cfg)
		}
		l.settleLocked(p, outcome{res: res})
	}
	l.mu.Unlock()
}

// fenced handles someone else's file at our own slot.
func (l *Log) fenced(key string, theirs *File) error {
	if theirs.Kind.fences() {
		l.lease.Supersede(fmt.Errorf("%s at %s by epoch %d", theirs.Kind, key, theirs.By))
		l.s.cfg.logger.Warn("log fenced", "cell", l.s.cell, "epoch", l.epoch, "key", key, "by", theirs.By)
		return l.lease.Err()
	}
	return errcode.Errorf(errcode.CodeNotHolder, "slot %s holds records of another writer (epoch %d)", key, theirs.Epoch)
}

// pending is one Append (or AppendBatch) waiting for its group commit.
type pending struct {
	recs   [][]byte
	key    string   // its idempotency key, "" for none
	digest [16]byte // of recs, when keyed
	match  Pos      // the position its first record must get, 0 for any
	taken  bool     // picked up by the writer: the outcome is no longer ours to cancel
	done   chan outcome
	// settled is closed once out holds the outcome, for the appends with
	// the same key that wait for this one (keyed appends only).
	settled chan struct{}
	out     outcome
}

func (p *pending) size() int {
	n := 0
	for _, r := range p.recs {
		n += len(r)
	}
	return n
}

// settleLocked gives p its outcome, once, and ends its place among the
// keys in flight (a success is in the window by now); l.mu must be held.
func (l *Log) settleLocked(p *pending, o outcome) {
	if p.key != "" && l.x != nil && l.x.ks != nil && l.x.ks.flight[p.key] == p {
		delete(l.x.ks.flight, p.key)
	}
	p.settleLocked(o)
}

// settleLocked gives p its outcome, once; the log's mutex must be held.
func (p *pending) settleLocked(o outcome) {
	if p.settled != nil {
		select {
		case <-p.settled:
			return
		default:
		}
		p.out = o
		close(p.settled)
	}
	select {
	case p.done <- o:
	default:
	}
}

type outcome struct {
	res BatchResult
	err error
}
