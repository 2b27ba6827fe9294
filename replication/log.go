package replication

import (
	"context"
	"errors"
	"sync"

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
	// TS is the record's timestamp: milliseconds since the Unix epoch,
	// assigned by the owner, never decreasing along the cell's log.
	TS int64
	// Replayed is true when a keyed append was answered with the result
	// of an earlier one with the same key: nothing was written.
	Replayed bool
}

// Log is the writer side of a cell's log for one epoch. Open makes one from
// a lease; Append and Snapshot borrow the lease, and so does a Read with
// the barrier (see borrow); Close seals the chain. A Log is safe for
// concurrent use: appends from many goroutines are group-committed, one
// transaction file per PUT, one PUT in flight.
//
// Its code is split by concern: the fencing walk that opens it (fence.go),
// the writer that group-commits appends (writer.go), its life from open to
// closed or abandoned (lifecycle.go), and reads (logread.go).
type Log struct {
	s     store // inline: a daemon keeps a Log per held cell
	lease *owner.Lease
	epoch uint64
	start Head // the chain head when the log opened

	mu      sync.Mutex   // guards everything below
	state   state        // open, closing, closed, … (lifecycle.go): what the log may still do
	err     error        // sticky: once set, every append fails (see notSent)
	next    TxID         // the next slot to write: every slot below it is durable
	nextPos Pos          // the position of the first record at next
	index   []indexEntry // (txid, first position) of files this log wrote
	lastTS  int64        // the newest timestamp written or fenced: the next one is at least this
	w       *writer      // the running writer goroutine and its queue (writer.go); nil while none runs
	x       *extras      // what only some logs need; nil until the first of them
}

// extras is the state of a log that only a Close, a keyed append or a
// waiting reader (Changed) makes, kept out of line: a daemon keeps a Log
// per held cell, most of them idle.
type extras struct {
	c  closer    // the Close attempts (lifecycle.go)
	ks *keyState // the idempotency window (keyed.go); nil until the first keyed append
	// changed is closed at the next commit or state change (Changed);
	// nil while nobody waits.
	changed chan struct{}
}

// extrasLocked returns the log's extras, made on first use; l.mu must be
// held.
func (l *Log) extrasLocked() *extras {
	if l.x == nil {
		l.x = &extras{}
	}
	return l.x
}

type indexEntry struct {
	txid TxID
	pos  Pos
}

// open logs, one per lease: a second writer in one epoch would race the
// first for its own slots.
var (
	openMu   sync.Mutex
	openLogs = map[*owner.Lease]*Log{}
	// openedOnce holds the created leases (Lease.Created) whose log was
	// opened, until the lease ends: only a lease's first Open may skip
	// the fencing walk.
	openedOnce = map[*owner.Lease]bool{}
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
// A lease whose claim created own.json (owner.Lease.Created: epoch 1, no
// predecessor) skips all four steps on its first Open, which sends no
// request: every listing counts epoch 1 announced, so a successor's walk
// tombstones its slot 1 unless epoch 1's record is there first.
//
// A lease whose claim took its predecessor's released end announced its
// epoch in that claim record (owner.Lease.AnnouncedByClaim): steps 1 and 2
// are skipped, every successor's walk counting the epoch announced (the
// record's "announces", carried on by every later write of own.json), and
// one read of the named seal replaces steps 3 and 4, or none when the
// release was this node's own and its seal was seen to land. Every walk
// also counts the epoch the record its claim replaced announced
// (owner.Lease.Unmarked).
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
		s:     makeStore(b, lease.Cell(), opts),
		lease: lease,
		epoch: lease.Epoch(),
	}
	openLogs[lease] = l
	first := !openedOnce[lease]
	if first && lease.Created() {
		openedOnce[lease] = true
		lease.AfterEnd(func() {
			openMu.Lock()
			delete(openedOnce, lease)
			openMu.Unlock()
		})
	}
	openMu.Unlock()

	var h Head
	var err error
	if first && lease.Created() && lease.Epoch() == 1 {
		// The claim created own.json: no epoch came before this one, so
		// there is nothing to fence, and a successor treats epoch 1 as
		// announced whether or not it has a marker (see listLog), so its
		// walk tombstones slot 1 here if this log has not written it.
		// The chain starts at slot 1. Only the lease's first Open: a
		// later one may follow this log's own records or seal.
		h = Head{Next: 1, NextPos: 1}
	} else {
		prev, ok := lease.TakePrevEnd()
		h, err = l.fence(ctx, prev, ok)
	}
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

// Changed returns a channel that is closed when the log next changes: a
// transaction file committed (its appends acknowledged), or the log
// closing or ending. A reader that found nothing new waits on it instead
// of polling; it takes the channel before it reads, so that a commit
// between its read and its wait is not missed. The channel is made on
// first use and replaced after each change: a log nobody waits on keeps
// none, and no goroutine waits on anyone's behalf.
func (l *Log) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state.final() {
		ch := make(chan struct{})
		close(ch) // nothing will change it any more: read again
		return ch
	}
	x := l.extrasLocked()
	if x.changed == nil {
		x.changed = make(chan struct{})
	}
	return x.changed
}

// wakeLocked wakes the waiters of Changed; l.mu must be held.
func (l *Log) wakeLocked() {
	if l.x != nil && l.x.changed != nil {
		close(l.x.changed)
		l.x.changed = nil
	}
}

// borrow is how every call that acts as the lease's holder takes the
// lease, first, before it sends anything: Append and Snapshot with the
// lease their caller passes, a Read with the barrier with the log's own
// (a plain Read acts for nobody: it reads what is durable, as any reader
// may). It refuses a lease that is not this log's (DEED-E024) or that is
// no longer valid (its own code).
func (l *Log) borrow(lease *owner.Lease) error {
	if err := lease.Check(); err != nil {
		return err
	}
	if lease != l.lease {
		return errcode.Errorf(errcode.CodeNotHolder, "not the holder: the log of cell %s epoch %d belongs to another lease", l.s.cell, l.epoch)
	}
	return nil
}
