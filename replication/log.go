package replication

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
)

// Result says where an appended record landed.
type Result struct {
	Epoch uint64
	TxID  TxID // the transaction file (slot) that carries it
	Pos   Pos  // the record's position in the cell's log
	// FirstPos and Count describe the whole group commit the record was in.
	FirstPos Pos
	Count    int
}

// Log is the writer side of a cell's log for one epoch. Open makes one from
// a lease; Append, Snapshot and Read borrow the lease; Close seals the
// chain. A Log is safe for concurrent use: appends from many goroutines are
// group-committed, one transaction file per PUT, one PUT in flight.
type Log struct {
	s     *store
	lease *owner.Lease
	epoch uint64
	start Head // the chain head when the log opened

	// The writer goroutine runs only while there is something to commit:
	// Append starts it when it is not running, and it exits once the queue
	// has stayed empty for writerLinger, so an idle log holds no goroutine.
	// These are set when it starts and cleared when it stops, under mu.
	ctx     context.Context    // the running writer's; cancelled by Close on timeout
	cancel  context.CancelFunc // cancels ctx
	stopped chan struct{}      // closed when the running writer exits
	kick    chan struct{}      // wakes a lingering writer: an append, or Close

	mu       sync.Mutex
	queue    []*pending // never empty while no writer runs
	running  bool       // a writer goroutine is running
	next     TxID       // the next slot to write: every slot below it is durable
	nextPos  Pos
	err      error         // sticky: once set, every append fails (see notSent)
	closing  bool          // Close or Abandon was called: appends are refused
	closed   chan struct{} // made by each Close attempt; closed when it ends
	closeErr error         // the last Close attempt's outcome
	// closeRunning: a Close attempt is under way (others wait for it).
	// closeFinal: an attempt succeeded, or the log was abandoned; a Close
	// after a failed attempt tries again.
	closeRunning, closeFinal bool
	abandoned                bool               // Abandon was called: Close must not seal
	stopClose                context.CancelFunc // cuts short a Close under way (set while it runs)
	index                    []indexEntry       // (txid, first position) of files this log wrote
}

type indexEntry struct {
	txid TxID
	pos  Pos
}

// pending is one Append waiting for its group commit.
type pending struct {
	data  []byte
	taken bool // picked up by the writer: the outcome is no longer ours to cancel
	done  chan outcome
}

type outcome struct {
	res Result
	err error
}

// open logs, one per lease: a second writer in one epoch would race the
// first for its own slots.
var (
	openMu   sync.Mutex
	openLogs = map[*owner.Lease]*Log{}
)

var (
	// ErrClosed is wrapped by the refusal of an append, or of a barrier
	// read, on a log that was closed (DEED-E040 to a caller that closed
	// it itself). A server that closes logs under its clients' requests
	// (a release, a shutdown) tells them what happened instead.
	ErrClosed    = errors.New("log closed")
	errAbandoned = errors.New("log abandoned")
)

// Open starts the log of lease's epoch E. Before anything is written it
// fences every predecessor that could still write, at a cost that does not
// grow with the number of epochs since the last one with data:
//
//  1. it announces E: it creates E's announcement marker (create-only);
//  2. it reads the ownership record again: an epoch above E there means E
//     is fenced already, and Open ends the lease as superseded (DEED-E021)
//     before it writes anything;
//  3. it LISTs the log (after 1 and 2, never a listing from before): the
//     announced epochs, and where the newest records are;
//  4. it walks the chain with the restore rule to its end, puts a seal at
//     the end slot T of the newest epoch with data and a tombstone at T of
//     every epoch of that LIST's announced epochs between it and E, and
//     starts E's chain at T. A 412 at any of those slots is answered by
//     reading it: a record means that epoch has data, so the walk follows
//     it to its new end; a seal or tombstone someone else wrote is accepted.
//
// An epoch that never announced (a lock-only claim, or a claimer that died
// before step 1) never writes, so it needs nothing. One that announces after
// E's LIST announced after E's claim, so its own step 2 sees E and it never
// writes either.
//
// If E itself was already fenced by a newer epoch, Open ends the lease as
// superseded and returns DEED-E021. A zero, released or fenced lease is
// refused with its code. One log may be open per lease; Close it (before
// releasing the lease) to drain its appends and seal its chain.
func Open(ctx context.Context, b bucket.Bucket, lease *owner.Lease, opts ...Option) (*Log, error) {
	if err := lease.Check(); err != nil {
		return nil, err
	}
	openMu.Lock()
	if openLogs[lease] != nil {
		openMu.Unlock()
		return nil, errcode.Errorf(errcode.CodeBadRequest, "open log %s epoch %d: a log is already open on this lease", lease.Cell(), lease.Epoch())
	}
	l := &Log{
		s:     newStore(b, lease.Cell(), opts),
		lease: lease,
		epoch: lease.Epoch(),
	}
	openLogs[lease] = l
	openMu.Unlock()

	h, err := l.fence(ctx)
	if err != nil {
		forget(l)
		return nil, errcode.Wrap(err, "open log %s epoch %d", lease.Cell(), lease.Epoch())
	}
	l.start, l.next, l.nextPos = h, h.Next, h.NextPos
	l.s.cfg.logger.Info("log opened", "cell", lease.Cell(), "epoch", l.epoch, "next", uint64(h.Next), "next_pos", uint64(h.NextPos))
	return l, nil
}

func forget(l *Log) {
	openMu.Lock()
	if openLogs[l.lease] == l {
		delete(openLogs, l.lease)
	}
	openMu.Unlock()
}

// maxFenceAttempts bounds restarts of the fencing walk after a GC race.
const maxFenceAttempts = 5

// fence announces E, checks that E is still the cell's newest epoch, seals
// the predecessors and returns where E's chain starts.
func (l *Log) fence(ctx context.Context) (Head, error) {
	if brokenRecheckFirst {
		if err := l.recheck(ctx); err != nil {
			return Head{}, err
		}
	}
	if err := l.announce(ctx); err != nil {
		return Head{}, err
	}
	if !brokenNoRecheck && !brokenRecheckFirst {
		if err := l.recheck(ctx); err != nil {
			return Head{}, err
		}
	}
	var err error
	for attempt := 0; attempt < maxFenceAttempts; attempt++ {
		// A new LIST on every attempt: each is sent after the claim and
		// the re-check, and none is reused from an earlier walk.
		var ls listing
		if ls, err = l.s.listLog(ctx); err != nil {
			return Head{}, err
		}
		if brokenListBeforeClaim {
			ls.announced = staleAnnounced(l.s.cell, l.epoch, ls.announced)
		}
		var a anchor
		if a, err = l.s.findAnchor(ctx, ls, l.epoch); err != nil {
			return Head{}, err
		}
		var h Head
		h, err = l.fenceFrom(ctx, a, ls.announced)
		if !errors.Is(err, errGCRace) {
			return h, err
		}
		l.s.cfg.logger.Info("fencing walk raced with GC; starting again", "cell", l.s.cell, "epoch", l.epoch)
	}
	return Head{}, errcode.Errorf(errcode.CodeUnavailable, "fence predecessors: %w", err)
}

// announceBody is the content of E's announcement marker. It is the same
// for every attempt of one lease, so that an Open retried on the same lease
// finds its own marker; nothing reads it but diagnosis.
func announceBody(epoch uint64, token string) []byte {
	return fmt.Appendf(nil, "deed announce epoch=%d token=%s\n", epoch, token)
}

// announce creates E's announcement marker, create-only. Its outcome is
// learned for certain before Open goes on (an ambiguous PUT is read back
// until it is known): a re-check made while the marker is in doubt would
// prove nothing, since a marker that lands only after a successor's LIST
// is one that successor does not fence.
func (l *Log) announce(ctx context.Context) error {
	key := AnnounceKey(l.s.cell, l.epoch)
	theirs, _, err := l.s.createRaw(ctx, key, announceBody(l.epoch, l.lease.Token()))
	if err != nil {
		return fmt.Errorf("announce: %w", err)
	}
	if theirs != nil {
		return errcode.Errorf(errcode.CodeNotHolder, "announce: %s was written by another writer of epoch %d", key, l.epoch)
	}
	return nil
}

// recheck reads the ownership record after the announcement: an epoch
// above E there means a newer claim came first, and E must write nothing
// (the newer owner's LIST may have missed E's marker). The lease ends as
// superseded.
func (l *Log) recheck(ctx context.Context) error {
	var rec owner.Record
	var exists bool
	err := l.s.retry(ctx, l.s.cfg.readAttempts, func(ctx context.Context) error {
		var err error
		rec, exists, err = owner.Inspect(ctx, l.s.b, l.s.cell)
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("re-read the ownership record: %w", err)
	case !exists:
		return errcode.Errorf(errcode.CodeCorruptOwner, "re-read the ownership record: %s is missing", owner.CellKey(l.s.cell))
	case rec.Epoch > l.epoch:
		l.lease.Supersede(fmt.Errorf("epoch %d claimed before epoch %d's log opened", rec.Epoch, l.epoch))
		l.s.cfg.logger.Warn("log fenced before it opened", "cell", l.s.cell, "epoch", l.epoch, "by", rec.Epoch)
		return l.lease.Err()
	}
	return nil
}

// fenceFrom is the sealing walk from anchor a, with ann the announced
// epochs of E's LIST. It is the restore rule with one addition: where a
// reader would end the chain below E, the writer fences it. A missing slot
// right after records is the end of that epoch's chain: it gets a seal. At
// a seal or tombstone in epoch X at slot T, each announced epoch of ann
// between X and E gets a tombstone at T, in order, until one turns out to
// hold a record there (the chain goes on in it). Epochs that are not in
// ann get nothing: they never announced before the LIST, so they never
// write.
func (l *Log) fenceFrom(ctx context.Context, a anchor, ann []uint64) (Head, error) {
	s, E := l.s, l.epoch
	c := a.at
	checked := false // stillValid was asked since the walk met its first gap
	gap := func(end TxID) error {
		if checked {
			return nil
		}
		checked = true
		// Make sure the gap is not a file GC deleted under this walk.
		return s.stillValid(ctx, a, end)
	}
	for {
		if c.epoch >= E {
			key := SlotKey(s.cell, c.epoch, c.txid)
			f, _, err := s.read(ctx, key)
			if err != nil {
				return Head{}, err
			}
			if c.epoch > E { // only a broken rule (a test variant) gets here
				return Head{}, errcode.Errorf(errcode.CodeSuperseded, "fence predecessors: the walk passed epoch %d", E)
			}
			return l.ownSlot(ctx, key, c, f)
		}
		if c.epoch != 0 {
			key := SlotKey(s.cell, c.epoch, c.txid)
			f, _, err := s.read(ctx, key)
			if err != nil {
				return Head{}, err
			}
			if f == nil {
				// The end of the chain, below E: fill it.
				if err := gap(c.txid); err != nil {
					return Head{}, err
				}
				kind := KindTombstone
				if c.data {
					kind = KindSeal
				}
				if f, err = l.fill(ctx, c, kind); err != nil {
					return Head{}, err
				}
			}
			if err := checkPos(key, f, c); err != nil {
				return Head{}, err
			}
			if f.Kind == KindRecords {
				c, _, _ = step(c, f)
				checked = false // a gap further on is a new question
				continue
			}
		}
		// A seal or tombstone at (X, T): tombstone T of the announced
		// epochs between X and E, up to the first that holds a record.
		next := cursor{epoch: E, txid: c.txid, pos: c.pos}
		for _, y := range (&announced{epochs: ann}).above(c.epoch) {
			if y >= E || brokenNoSeal || variant == variantNoTombstones {
				break
			}
			if err := gap(c.txid); err != nil {
				return Head{}, err
			}
			at := cursor{epoch: y, txid: c.txid, pos: c.pos}
			f, err := l.fill(ctx, at, KindTombstone)
			if err != nil {
				return Head{}, err
			}
			key := SlotKey(s.cell, y, c.txid)
			if err := checkPos(key, f, at); err != nil {
				return Head{}, err
			}
			if f.Kind == KindRecords {
				next, _, _ = step(at, f)
				checked = false
				break
			}
		}
		c = next
	}
}

// fill creates a seal or tombstone (kind) at slot c for E, create-only, and
// returns the file that holds the slot afterwards: the marker it wrote, or
// what someone else wrote there first.
func (l *Log) fill(ctx context.Context, c cursor, kind Kind) (*File, error) {
	s, E := l.s, l.epoch
	key := SlotKey(s.cell, c.epoch, c.txid)
	if brokenNoSeal {
		return &File{Kind: kind, Epoch: c.epoch, TxID: c.txid, Pos: c.pos, By: E}, nil
	}
	f := &File{Kind: kind, Epoch: c.epoch, TxID: c.txid, Token: l.lease.Token(), Pos: c.pos, By: E}
	body, err := Encode(f)
	if err != nil {
		return nil, err
	}
	theirs, err := s.create(ctx, key, body)
	if err != nil {
		return nil, err
	}
	if theirs != nil {
		return theirs, nil // 412: decide on what is there
	}
	s.cfg.logger.Info("fenced predecessor", "cell", s.cell, "epoch", E, "slot_epoch", c.epoch, "txid", uint64(c.txid), "kind", kind.String())
	return f, nil
}

// ownSlot decides what the walk found at E's own first slot: free (the
// chain starts here), fenced by a newer epoch, sealed by our own Close, or
// records of this lease from a log that ended without sealing (continue
// after them).
func (l *Log) ownSlot(ctx context.Context, key string, c cursor, f *File) (Head, error) {
	for {
		switch {
		case f == nil:
			return Head{Next: c.txid, NextPos: c.pos}, nil
		case f.Token != l.lease.Token() && f.Kind == KindRecords:
			return Head{}, errcode.Errorf(errcode.CodeNotHolder, "slot %s holds records of another writer of epoch %d", key, l.epoch)
		case f.Kind.fences() && f.Token == l.lease.Token() && f.By == l.epoch:
			return Head{}, errcode.Errorf(errcode.CodeBadRequest, "open log: epoch %d's log was closed (sealed at %s); release the lease and claim again", l.epoch, key)
		case f.Kind.fences():
			return Head{}, l.fenced(key, f)
		}
		if err := checkPos(key, f, c); err != nil {
			return Head{}, err
		}
		c, _, _ = step(c, f)
		key = SlotKey(l.s.cell, l.epoch, c.txid)
		var err error
		if f, _, err = l.s.read(ctx, key); err != nil {
			return Head{}, err
		}
	}
}

// Epoch is the log's epoch.
func (l *Log) Epoch() uint64 { return l.epoch }

// Cell is the log's cell.
func (l *Log) Cell() string { return l.s.cell }

// Start is where this epoch's chain started when the log opened: the slot
// and position of the first record it writes.
func (l *Log) Start() Head { return l.start }

// Head is where the chain ends now: every slot below Next is durable.
func (l *Log) Head() Head {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Head{Next: l.next, NextPos: l.nextPos}
}

// checkLease refuses a lease that is not this log's (DEED-E024) or that is
// no longer valid (its own code).
func (l *Log) checkLease(lease *owner.Lease) error {
	if err := lease.Check(); err != nil {
		return err
	}
	if lease != l.lease {
		return errcode.Errorf(errcode.CodeNotHolder, "not the holder: the log of cell %s epoch %d belongs to another lease", l.s.cell, l.epoch)
	}
	return nil
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
	if err := l.checkLease(lease); err != nil {
		return Result{}, err
	}
	p := &pending{data: record, done: make(chan outcome, 1)}
	l.mu.Lock()
	switch {
	case l.err != nil:
		err := l.notSent(l.err)
		l.mu.Unlock()
		return Result{}, err
	case l.closing:
		l.mu.Unlock()
		return Result{}, errcode.Errorf(errcode.CodeBadRequest, "append to %s epoch %d: %w", l.s.cell, l.epoch, ErrClosed)
	}
	l.queue = append(l.queue, p)
	if l.running {
		l.kickLocked()
	} else {
		l.startLocked()
	}
	l.mu.Unlock()
	select {
	case o := <-p.done:
		return o.res, o.err
	case <-ctx.Done():
	}
	l.mu.Lock()
	if !p.taken {
		for i, q := range l.queue {
			if q == p {
				l.queue = append(l.queue[:i], l.queue[i+1:]...)
				break
			}
		}
		l.mu.Unlock()
		return Result{}, fmt.Errorf("append to %s: not written: %w", l.s.cell, ctx.Err())
	}
	l.mu.Unlock()
	select {
	case o := <-p.done: // decided meanwhile
		return o.res, o.err
	default:
	}
	return Result{}, errcode.Errorf(errcode.CodeAmbiguous, "append to %s: outcome unknown, the record may still become durable: %w", l.s.cell, ctx.Err())
}

// startLocked starts the writer goroutine; l.mu must be held. Its context
// carries none of Open's or Append's values: it outlives both.
func (l *Log) startLocked() {
	l.running = true
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.stopped = make(chan struct{})
	l.kick = make(chan struct{}, 1)
	go l.run()
}

// kickLocked wakes the writer if it lingers; l.mu must be held.
func (l *Log) kickLocked() {
	if l.kick != nil {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// stopLocked marks the writer stopped as it exits; l.mu must be held.
func (l *Log) stopLocked() {
	l.cancel()
	close(l.stopped)
	l.running, l.ctx, l.cancel, l.stopped, l.kick = false, nil, nil, nil, nil
	l.queue = nil // drop the backing array: an idle log keeps nothing
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
			q := l.queue
			err := l.notSent(l.err)
			l.stopLocked()
			l.mu.Unlock()
			fail(q, err)
			return
		}
		if len(l.queue) == 0 {
			if lingered || l.closing {
				l.stopLocked()
				l.mu.Unlock()
				return
			}
			kick, ctx := l.kick, l.ctx
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
		txid, pos := l.next, l.nextPos
		l.mu.Unlock()
		l.commit(batch, txid, pos)
		l.settle(len(batch))
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
		n := len(l.queue)
		l.mu.Unlock()
		if n >= last || n == prev {
			return
		}
		prev = n
		runtime.Gosched()
	}
}

// takeLocked removes the next group commit from the queue: at least one
// record, then as many as fit the bounds.
func (l *Log) takeLocked() []*pending {
	n, size := 0, 0
	for n < len(l.queue) && n < l.s.cfg.maxBatchRecords {
		d := len(l.queue[n].data)
		if n > 0 && size+d > l.s.cfg.maxBatchBytes {
			break
		}
		size += d
		n++
	}
	batch := make([]*pending, n)
	copy(batch, l.queue[:n])
	rest := copy(l.queue, l.queue[n:])
	clear(l.queue[rest:]) // no stale pointers to settled appends
	l.queue = l.queue[:rest]
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

func fail(q []*pending, err error) {
	for _, p := range q {
		p.done <- outcome{err: err}
	}
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
		fail(batch, err)
		return
	}
	f := &File{Kind: KindRecords, Epoch: l.epoch, TxID: txid, Token: l.lease.Token(), Pos: pos, Records: make([][]byte, len(batch))}
	for i, p := range batch {
		f.Records[i] = p.data
	}
	key := SlotKey(l.s.cell, l.epoch, txid)
	body, err := Encode(f)
	if err != nil {
		// Nothing was sent; only this batch fails.
		fail(batch, err)
		return
	}
	if brokenEarlyAck {
		batch = ackEarly(batch, l.epoch, txid, pos)
	}
	theirs, puts, err := l.s.createCounted(l.ctx, key, body)
	if err == nil && theirs != nil {
		err = l.fenced(key, theirs)
	}
	if err != nil {
		l.setErr(err)
		fail(batch, err)
		return
	}
	if f := l.s.cfg.onCommit; f != nil {
		f(len(batch), puts)
	}
	l.mu.Lock()
	l.next, l.nextPos = txid+1, f.NextPos()
	l.index = append(l.index, indexEntry{txid: txid, pos: pos})
	if len(l.index) > l.s.cfg.indexLen {
		l.index = append(l.index[:0], l.index[len(l.index)-l.s.cfg.indexLen/2:]...)
	}
	l.mu.Unlock()
	for i, p := range batch {
		p.done <- outcome{res: Result{Epoch: l.epoch, TxID: txid, Pos: pos + Pos(i), FirstPos: pos, Count: len(batch)}}
	}
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

// Close waits for queued appends, then seals the log's own chain end (a
// seal at its next slot, in its own epoch), so that the release that
// follows lets the next claimer start without walking. It does not release
// the lease: the caller does, after Close. If ctx ends first, pending
// appends fail (DEED-E012 for one in flight) and the chain is left for the
// next claimer to seal.
func (l *Log) Close(ctx context.Context) error {
	l.mu.Lock()
	for l.closeRunning {
		running := l.closed
		l.mu.Unlock()
		select {
		case <-running:
		case <-ctx.Done():
			return fmt.Errorf("close log %s: %w", l.s.cell, ctx.Err())
		}
		l.mu.Lock()
	}
	if l.closeFinal {
		err := l.closeErr
		l.mu.Unlock()
		return err
	}
	// The first attempt, or a retry after one that failed (a store outage,
	// a deadline): appends stay refused either way.
	l.closing = true
	l.closeRunning = true
	l.closed = make(chan struct{})
	l.kickLocked()
	l.mu.Unlock()
	err := l.close(ctx)
	l.mu.Lock()
	l.closeErr = err
	l.closeRunning = false
	final := err == nil || l.abandoned
	l.closeFinal = final
	running := l.closed
	l.mu.Unlock()
	close(running)
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
	l.abandoned = true
	l.closing = true
	cancel, stopped, stopClose := l.cancel, l.stopped, l.stopClose
	running := l.closeRunning
	settle := !running && !l.closeFinal
	if settle {
		l.closeFinal = true
		l.closeErr = l.err
	}
	l.mu.Unlock()
	if running && stopClose != nil {
		stopClose()
	}
	if cancel != nil {
		cancel()
		<-stopped
	}
	if settle {
		forget(l)
	}
}

func (l *Log) close(ctx context.Context) error {
	ctx, stopClose := context.WithCancel(ctx)
	defer stopClose()
	// Closing stops new appends, so once the writer (if one runs) has
	// drained the queue and exited, none starts again.
	l.mu.Lock()
	l.stopClose = stopClose
	stopped, cancel, abandoned, aerr := l.stopped, l.cancel, l.abandoned, l.err
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
	werr, next, pos, abandoned := l.err, l.next, l.nextPos, l.abandoned
	l.mu.Unlock()
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
		body, err := Encode(&File{Kind: KindSeal, Epoch: l.epoch, TxID: next, Token: l.lease.Token(), Pos: pos, By: l.epoch})
		if err != nil {
			return err
		}
		theirs, err := l.s.create(ctx, key, body)
		if err != nil {
			return errcode.Wrap(err, "close log %s epoch %d: seal", l.s.cell, l.epoch)
		}
		if theirs == nil {
			l.s.cfg.logger.Info("log closed and sealed", "cell", l.s.cell, "epoch", l.epoch, "key", key)
			return nil
		}
		if unknown && theirs.Kind == KindRecords && theirs.Epoch == l.epoch && theirs.Token == l.lease.Token() {
			unknown = false // one write at most was in flight
			next, pos = next+1, theirs.NextPos()
			continue
		}
		if ferr := l.fenced(key, theirs); errcode.CodeOf(ferr) != errcode.CodeSuperseded {
			return errcode.Wrap(ferr, "close log %s epoch %d: seal", l.s.cell, l.epoch)
		}
		return nil
	}
}

// Read returns up to limit records after position after (limit ≤ 0: to the
// end). With barrier it is linearizable: first it checks, with one HEAD of
// the log's next slot, that no newer epoch has fenced this one — a
// successor writes nothing before it seals that slot — so the read reflects
// every write acknowledged anywhere before it began. If the slot is fenced,
// the lease ends and Read returns DEED-E021.
func (l *Log) Read(ctx context.Context, after Pos, limit int, barrier bool) ([]Record, error) {
	if barrier {
		if err := l.barrier(ctx); err != nil {
			return nil, err
		}
	}
	var err error
	for attempt := 0; attempt < maxReadAttempts; attempt++ {
		var a anchor
		var ann *announced // from an index anchor: listed at the first seal
		var ok bool
		if a, ok, err = l.indexAnchor(ctx, after); err == nil {
			if !ok {
				a, ann, err = l.s.locate(ctx, after)
			}
			if err == nil {
				var recs []Record
				if recs, _, err = l.s.readFrom(ctx, a, ann, after, limit); err == nil {
					return recs, nil
				}
			}
		}
		if !errors.Is(err, errGCRace) {
			break
		}
	}
	return nil, errcode.Wrap(err, "read %s after %d", l.s.cell, after)
}

// barrier checks that the log's next slot is still free. A file there is
// either ours (a PUT that landed since the head was read: look at the slot
// after it) or a newer epoch's seal.
func (l *Log) barrier(ctx context.Context) error {
	l.mu.Lock()
	t := l.next
	l.mu.Unlock()
	for {
		key := SlotKey(l.s.cell, l.epoch, t)
		ok, err := l.s.head(ctx, key)
		if err != nil {
			return errcode.Wrap(err, "read barrier %s epoch %d", l.s.cell, l.epoch)
		}
		if !ok {
			return nil
		}
		f, _, err := l.s.read(ctx, key)
		if err != nil {
			return errcode.Wrap(err, "read barrier %s epoch %d", l.s.cell, l.epoch)
		}
		switch {
		case f == nil:
			return nil
		case f.Kind == KindRecords && f.Token == l.lease.Token():
			t++
			continue
		case f.Kind.fences() && f.Token == l.lease.Token():
			return errcode.Errorf(errcode.CodeBadRequest, "read barrier %s epoch %d: %w", l.s.cell, l.epoch, ErrClosed)
		}
		return errcode.Wrap(l.fenced(key, f), "read barrier %s epoch %d", l.s.cell, l.epoch)
	}
}

// indexAnchor starts a read from a file this log wrote, when the position
// is in its range, sparing the listing. Every slot below the log's head is
// durable, so a walk from it that ends below the head met a file GC
// deleted (anchor.covered): its starting file can be back although the
// files above it are gone, written again by a PUT of this log that was
// still travelling when GC deleted it.
func (l *Log) indexAnchor(ctx context.Context, after Pos) (anchor, bool, error) {
	want := after + 1
	l.mu.Lock()
	i := sort.Search(len(l.index), func(i int) bool { return l.index[i].pos > want }) - 1
	var e indexEntry
	if i >= 0 {
		e = l.index[i]
	}
	head := l.next
	l.mu.Unlock()
	if i < 0 {
		return anchor{}, false, nil
	}
	key := SlotKey(l.s.cell, l.epoch, e.txid)
	f, _, err := l.s.read(ctx, key)
	if err != nil || f == nil || f.Kind != KindRecords {
		return anchor{}, false, err
	}
	return anchor{at: cursor{epoch: l.epoch, txid: e.txid + 1, pos: f.NextPos(), data: true}, key: key, file: f, covered: head - 1}, true, nil
}
