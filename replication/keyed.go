package replication

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
)

// Defaults of the idempotency window (WithIdempotencyWindow).
const (
	DefaultKeyWindow = 10 * time.Minute
	DefaultKeyLimit  = 100_000
	// MaxBatchRecords bounds one AppendBatch.
	MaxBatchRecords = 4096
)

// WithIdempotencyWindow sets the idempotency window of a log: the keys it
// recognises are the newest limit keys of the last limit transaction
// files, no older than age before the newest record (by the records'
// timestamps). A keyed append retried within it is answered with the
// first one's result and writes nothing, whichever owner wrote the first;
// one retried after it is appended again, as a new record. The same
// definition holds for the owner that wrote the keys and for any later
// owner, which rebuilds the window from the bucket (see AppendBatch).
// Zero keeps a default (10 minutes, 100,000 keys).
func WithIdempotencyWindow(age time.Duration, limit int) Option {
	return func(c *config) {
		if age > 0 {
			c.keyWindow = age
		}
		if limit > 0 {
			c.keyLimit = limit
		}
	}
}

// AppendOptions are the conditions of an append.
type AppendOptions struct {
	// Key, when set, makes the append idempotent within the log's window
	// (WithIdempotencyWindow): if an append with this key landed already,
	// the answer is its result (Replayed set) and nothing is written; if
	// it is still in flight, this one waits for its outcome. The same key
	// with other records is refused with DEED-E043, applied no. See
	// ValidateKey.
	Key string
	// MatchPos, when not 0, is the position the first record must get:
	// the log's next position when it is written. Otherwise the append is
	// refused with DEED-E044 (applied no), naming the next position (see
	// MismatchError). With a Key, a replay answers the first outcome, not
	// a mismatch.
	MatchPos Pos
}

// BatchResult says where an appended batch landed.
type BatchResult struct {
	Epoch    uint64
	TxID     TxID // the one transaction file that carries the whole batch
	FirstPos Pos  // position of its first record
	LastPos  Pos  // and of its last
	TS       int64
	// Replayed is true when the answer is that of an earlier append with
	// the same key: nothing was written this time.
	Replayed bool
	// TxPos and TxCount describe the whole group commit it was part of.
	TxPos   Pos
	TxCount int
}

// MismatchError is the refusal of a conditional append (DEED-E044): the
// log's next position is NextPos, not the one the append named.
type MismatchError struct {
	Cell    string
	Want    Pos
	NextPos Pos
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s append to %s: not written: match_pos %d, but the next position is %d", errcode.CodePosMismatch, e.Cell, uint64(e.Want), uint64(e.NextPos))
}

// ErrorCode is DEED-E044.
func (e *MismatchError) ErrorCode() errcode.Code { return errcode.CodePosMismatch }

func mismatch(cell string, want, next Pos) error {
	return &MismatchError{Cell: cell, Want: want, NextPos: next}
}

func nowMillis() int64 { return time.Now().UnixMilli() }

// AppendBatch appends records (1 to MaxBatchRecords, within MaxFileLen)
// atomically: they go into one transaction file, at contiguous positions,
// all durable or none. Its outcomes are Append's; opts adds an idempotency
// key and a position condition, which apply to the batch as a whole. A
// batch that cannot fit one file is refused before anything is sent.
//
// The first keyed append after a log opens learns the keys its
// predecessors wrote within the window: it lists the log and reads the
// newest record files below the log's start, 64 at a time, newest first,
// until it passes the window (at most limit files; see
// WithIdempotencyWindow). Appends without a key never wait for it.
func (l *Log) AppendBatch(ctx context.Context, lease *owner.Lease, records [][]byte, opts AppendOptions) (BatchResult, error) {
	if err := l.borrow(lease); err != nil {
		return BatchResult{}, err
	}
	if len(records) == 0 || len(records) > MaxBatchRecords {
		return BatchResult{}, errcode.Errorf(errcode.CodeBadRequest, "append to %s: a batch holds 1..%d records, not %d", l.s.cell, MaxBatchRecords, len(records))
	}
	size := headerLen + len(l.lease.Token()) + trailerLen + 8 + binary.MaxVarintLen64
	for _, r := range records {
		size += uvarintLen(uint64(len(r))) + len(r)
	}
	if opts.Key != "" {
		if err := ValidateKey(opts.Key); err != nil {
			return BatchResult{}, errcode.Wrap(err, "append to %s", l.s.cell)
		}
		size += 3*binary.MaxVarintLen64 + len(opts.Key)
	}
	if size > MaxFileLen {
		return BatchResult{}, errcode.Errorf(errcode.CodeBadRequest, "append to %s: a batch of %d records needs %d bytes, more than one transaction file holds (%d)", l.s.cell, len(records), size, MaxFileLen)
	}
	p := &pending{recs: records, match: opts.MatchPos, done: make(chan outcome, 1)}
	if opts.Key == "" {
		return l.enqueue(ctx, p)
	}
	p.key, p.digest, p.settled = opts.Key, digest(records), make(chan struct{})
	if err := l.rebuildKeys(ctx); err != nil {
		return BatchResult{}, err
	}
	for {
		l.mu.Lock()
		ks := l.keysLocked()
		if e, ok := ks.done[opts.Key]; ok {
			l.mu.Unlock()
			if e.digest != p.digest {
				return BatchResult{}, reused(l.s.cell, opts.Key, e.res)
			}
			res := e.res
			res.Replayed = true
			return res, nil
		}
		first := ks.flight[opts.Key]
		if first == nil {
			l.mu.Unlock()
			return l.enqueue(ctx, p)
		}
		l.mu.Unlock()
		// The same key in flight: wait for its outcome. A success is in
		// the window by the time settled closes; a refusal frees the key.
		select {
		case <-first.settled:
		case <-ctx.Done():
			return BatchResult{}, errcode.Errorf(errcode.CodeAmbiguous, "append to %s: outcome unknown: an append with key %q is still in flight: %w", l.s.cell, opts.Key, ctx.Err())
		}
		l.mu.Lock()
		if ks.flight[opts.Key] == first {
			delete(ks.flight, opts.Key)
		}
		o := first.out
		l.mu.Unlock()
		if o.err != nil && errcode.CodeOf(o.err) == errcode.CodeAmbiguous {
			return BatchResult{}, o.err
		}
		if o.err == nil && first.digest != p.digest {
			return BatchResult{}, reused(l.s.cell, opts.Key, o.res)
		}
		// success: the window answers; a refusal (nothing written): try ours.
	}
}

func reused(cell, key string, first BatchResult) error {
	return errcode.Errorf(errcode.CodeKeyReused, "append to %s: not written: idempotency key %q was used for other records (at positions %d..%d, epoch %d)", cell, key, uint64(first.FirstPos), uint64(first.LastPos), first.Epoch)
}

// digest identifies an append's records, so that a retry with the same key
// can be told from another body.
func digest(records [][]byte) [16]byte {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, r := range records {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(r)))])
		h.Write(r)
	}
	var d [16]byte
	copy(d[:], h.Sum(nil))
	return d
}

// keyState is a log's idempotency window, made by its first keyed append.
type keyState struct {
	done   map[string]*keyEntry // keys landed within the window
	order  []*keyEntry          // the same, oldest first (head: order[head])
	head   int
	flight map[string]*pending // keyed appends queued or being written
	// rebuilt is closed once the predecessors' keys are in done; attempt
	// is the rebuild running now, if any.
	rebuilt chan struct{}
	attempt *rebuildAttempt
}

type keyEntry struct {
	key    string
	digest [16]byte
	res    BatchResult
}

func (l *Log) keysLocked() *keyState {
	x := l.extrasLocked()
	if x.ks == nil {
		x.ks = &keyState{done: map[string]*keyEntry{}, flight: map[string]*pending{}, rebuilt: make(chan struct{})}
	}
	return x.ks
}

// remember adds a landed key and drops what falls out of the window.
func (ks *keyState) remember(key string, d [16]byte, res BatchResult, cfg *config) {
	e := &keyEntry{key: key, digest: d, res: res}
	if old := ks.done[key]; old != nil {
		old.key = "" // superseded (only across the window's edge): its slot in order is dead
	}
	ks.done[key] = e
	ks.order = append(ks.order, e)
	ks.trim(res.TS, res.TxID, cfg)
}

// trim drops the keys out of the window that ends at a file with
// timestamp ts at slot txid.
func (ks *keyState) trim(ts int64, txid TxID, cfg *config) {
	for ks.head < len(ks.order) {
		e := ks.order[ks.head]
		live := len(ks.order) - ks.head
		if e.key != "" && live <= cfg.keyLimit && e.res.TS >= ts-cfg.keyWindow.Milliseconds() && uint64(e.res.TxID)+uint64(cfg.keyLimit) > uint64(txid) {
			break
		}
		if e.key != "" && ks.done[e.key] == e {
			delete(ks.done, e.key)
		}
		ks.order[ks.head] = nil
		ks.head++
	}
	if ks.head > 1024 && ks.head*2 > len(ks.order) {
		ks.order = append(ks.order[:0], ks.order[ks.head:]...)
		ks.head = 0
	}
}

// Keys is how many idempotency keys the log recognises now.
func (l *Log) Keys() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.x == nil || l.x.ks == nil {
		return 0
	}
	return len(l.x.ks.done)
}

// RebuildStats says what a log read to learn its predecessors' keys.
type RebuildStats struct {
	Lists, Gets int // requests sent (a LIST page counts once)
	Files, Keys int // record files read that fell in the window, and the keys in them
}

// rebuildAttempt is one run of the rebuild; err is set before done closes.
type rebuildAttempt struct {
	done chan struct{}
	err  error
}

// rebuildTimeout bounds one rebuild. It runs on its own context, not its
// callers': a window that takes longer to read than a caller waits (the
// worst case, 100,000 files of one key, takes some 1,700 round trips) is
// still learnt, while the keyed appends that wait for it give up unwritten
// and are retried.
const rebuildTimeout = 10 * time.Minute

// rebuildKeys waits until the log knows the keys written below its start
// within the window, starting the rebuild if none runs.
func (l *Log) rebuildKeys(ctx context.Context) error {
	l.mu.Lock()
	ks := l.keysLocked()
	select {
	case <-ks.rebuilt:
		l.mu.Unlock()
		return nil
	default:
	}
	a := ks.attempt
	if a == nil {
		a = &rebuildAttempt{done: make(chan struct{})}
		ks.attempt = a
		go l.runRebuild(ks, a)
	}
	l.mu.Unlock()
	select {
	case <-a.done:
	case <-ctx.Done():
		return fmt.Errorf("append to %s: not written: still learning the idempotency keys of earlier epochs: %w", l.s.cell, ctx.Err())
	}
	if a.err != nil {
		return errcode.Wrap(l.notSent(a.err), "append to %s: not written: learn the idempotency keys of earlier epochs", l.s.cell)
	}
	return nil
}

// runRebuild is one rebuild attempt; a failed one lets the next keyed
// append start another.
func (l *Log) runRebuild(ks *keyState, a *rebuildAttempt) {
	ctx, cancel := context.WithTimeout(context.Background(), rebuildTimeout)
	defer cancel()
	var err error
	if !brokenForgetKeys {
		_, err = l.readKeys(ctx)
	}
	l.mu.Lock()
	a.err = err
	if err == nil {
		close(ks.rebuilt)
	}
	ks.attempt = nil
	l.mu.Unlock()
	close(a.done)
}

// rebuildWave is how many record files the rebuild reads at once: 64
// round trips' worth of latency per wave, and at most 64 files (each under
// MaxFileLen) held at a time; of each, only its keys and a digest of their
// records are kept.
const rebuildWave = 64

// readKeys reads the predecessors' keys within the window into the log's
// key state and says what it cost.
func (l *Log) readKeys(ctx context.Context) (RebuildStats, error) {
	var st RebuildStats
	if l.start.Next <= 1 {
		return st, nil
	}
	ls, err := l.s.listLog(ctx)
	st.Lists++
	if err != nil {
		return st, err
	}
	var tops []listed
	for _, t := range ls.tops(l.epoch) {
		if t.txid < l.start.Next && uint64(t.txid)+uint64(l.s.cfg.keyLimit) >= uint64(l.start.Next) {
			tops = append(tops, t)
		}
	}
	// What each file in the window holds, newest first: its keys' entries
	// only (a file's records are dropped as soon as they are digested).
	type fileKeys struct {
		ts      int64
		txid    TxID
		entries []*keyEntry
	}
	var found []fileKeys
	cutoff, newest := int64(0), int64(0)
	keys := 0
	done := false
	for i := len(tops); i > 0 && !done; i -= rebuildWave {
		lo := max(0, i-rebuildWave)
		files := make([]*File, i-lo)
		errs := make(chan error, i-lo)
		for j := lo; j < i; j++ {
			go func() {
				f, err := l.s.probe(ctx, tops[j].key)
				files[j-lo] = f
				errs <- err
			}()
		}
		for range i - lo {
			if e := <-errs; e != nil && err == nil {
				err = e
			}
		}
		st.Gets += i - lo
		if err != nil {
			return st, err
		}
		for j := len(files) - 1; j >= 0 && !done; j-- {
			f := files[j]
			if f == nil || f.Kind != KindRecords { // a marker, a damaged file, or one GC deleted
				continue
			}
			if newest == 0 {
				newest = max(f.TS, 1)
				cutoff = newest - l.s.cfg.keyWindow.Milliseconds()
			}
			if f.TS < cutoff || keys >= l.s.cfg.keyLimit {
				done = true
				break
			}
			st.Files++
			fk := fileKeys{ts: f.TS, txid: f.TxID}
			for _, k := range f.Keys {
				first := f.Pos + Pos(k.First)
				if brokenReplayPos {
					first = f.Pos // the broken rule: the file's first position, not the key's
				}
				fk.entries = append(fk.entries, &keyEntry{key: k.Key, digest: digest(f.Records[k.First : k.First+k.Count]),
					res: BatchResult{Epoch: f.Epoch, TxID: f.TxID, FirstPos: first, LastPos: f.Pos + Pos(k.First+k.Count) - 1, TS: f.TS, TxPos: f.Pos, TxCount: len(f.Records)}})
			}
			found = append(found, fk)
			keys += len(f.Keys)
			st.Keys += len(f.Keys)
		}
		clear(files)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ks := l.keysLocked()
	// Oldest first, so that the window's order (and its trim) is the log's.
	for i := len(found) - 1; i >= 0; i-- {
		for _, e := range found[i].entries {
			if old := ks.done[e.key]; old == nil || old.res.TxID < e.res.TxID {
				ks.remember(e.key, e.digest, e.res, l.s.cfg)
			}
		}
	}
	if len(found) > 0 {
		ks.trim(found[0].ts, found[0].txid, l.s.cfg)
	}
	return st, nil
}

// RebuildKeys makes the log learn its predecessors' idempotency keys now
// (the first keyed append does it otherwise) and says what it read. It is
// for measuring: calling it twice reads twice.
func (l *Log) RebuildKeys(ctx context.Context) (RebuildStats, error) {
	return l.readKeys(ctx)
}
