package replication

import (
	"context"
	"errors"
	"slices"
	"sort"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
)

// Snapshot writes state as a snapshot covering every txid ≤ upTo, at
// e<E>/<upTo>.snapshot, create-only. upTo must be durable (below Head().Next)
// and no older than the slot before this log's start. Restore then starts
// from the newest snapshot, and GC may delete the files it covers.
//
// Writing the same snapshot twice is a no-op; a different state for a txid
// that already has a snapshot in this epoch is refused (DEED-E040).
func (l *Log) Snapshot(ctx context.Context, lease *owner.Lease, upTo TxID, state []byte) (Snapshot, error) {
	if err := l.borrow(lease); err != nil {
		return Snapshot{}, err
	}
	next, err := l.nextPosAfter(ctx, upTo)
	if err != nil {
		return Snapshot{}, errcode.Wrap(err, "snapshot %s at %d", l.s.cell, upTo)
	}
	key := SnapshotKey(l.s.cell, l.epoch, upTo)
	body, err := Encode(&File{Kind: KindSnapshot, Epoch: l.epoch, TxID: upTo, Token: lease.Token(), Pos: next, State: state})
	if err != nil {
		return Snapshot{}, err
	}
	theirs, err := l.s.create(ctx, key, body)
	if err != nil {
		return Snapshot{}, errcode.Wrap(err, "snapshot %s at %d", l.s.cell, upTo)
	}
	if theirs != nil {
		return Snapshot{}, errcode.Errorf(errcode.CodeBadRequest, "snapshot %s at %d: %s already holds a different snapshot", l.s.cell, upTo, key)
	}
	return Snapshot{Key: key, Epoch: l.epoch, TxID: upTo, NextPos: next, State: state}, nil
}

// SnapshotAt is Snapshot for a position: state covers every record up to
// and including position upTo, which must be committed (below Head's
// NextPos) and the last record of its transaction file, since a snapshot
// covers whole transactions: a position inside a batch is refused
// (DEED-E040) naming the batch's last one. It costs a read of two records
// unless upTo is the log's last.
func (l *Log) SnapshotAt(ctx context.Context, lease *owner.Lease, upTo Pos, state []byte) (Snapshot, error) {
	if err := l.borrow(lease); err != nil {
		return Snapshot{}, err
	}
	h := l.Head()
	switch {
	case upTo == 0:
		return Snapshot{}, errcode.Errorf(errcode.CodeBadRequest, "snapshot %s up to position 0: a snapshot covers at least position 1", l.s.cell)
	case upTo >= h.NextPos:
		return Snapshot{}, errcode.Errorf(errcode.CodeBadRequest, "snapshot %s up to position %d: not committed (the log's next position is %d)", l.s.cell, upTo, h.NextPos)
	case upTo == h.NextPos-1:
		return l.Snapshot(ctx, lease, h.Next-1, state)
	}
	recs, err := l.Read(ctx, upTo-1, 2, false)
	if err != nil {
		return Snapshot{}, errcode.Wrap(err, "snapshot %s up to position %d", l.s.cell, upTo)
	}
	if len(recs) != 2 || recs[0].Pos != upTo {
		return Snapshot{}, errcode.Errorf(errcode.CodeUnavailable, "snapshot %s up to position %d: the records at %d and after were not read (compacted or moving); retry", l.s.cell, upTo, upTo)
	}
	if recs[1].TxID == recs[0].TxID {
		return Snapshot{}, errcode.Errorf(errcode.CodeBadRequest, "snapshot %s up to position %d: the position is inside transaction %d (a batch), which a snapshot covers whole: snapshot up to its last record instead", l.s.cell, upTo, recs[0].TxID)
	}
	return l.Snapshot(ctx, lease, recs[0].TxID, state)
}

// nextPosAfter is the position after txid upTo's last record.
func (l *Log) nextPosAfter(ctx context.Context, upTo TxID) (Pos, error) {
	l.mu.Lock()
	next, nextPos, start := l.next, l.nextPos, l.start
	i := sort.Search(len(l.index), func(i int) bool { return l.index[i].txid > upTo })
	var after *indexEntry
	if i < len(l.index) && l.index[i].txid == upTo+1 {
		after = &l.index[i]
	}
	l.mu.Unlock()
	switch {
	case upTo == 0 || upTo+1 < start.Next:
		return 0, errcode.Errorf(errcode.CodeBadRequest, "txid %d is before this log's start %d", upTo, start.Next)
	case upTo >= next:
		return 0, errcode.Errorf(errcode.CodeBadRequest, "txid %d is not durable yet (head %d)", upTo, next)
	case upTo+1 == start.Next:
		return start.NextPos, nil
	case upTo+1 == next:
		return nextPos, nil
	case after != nil:
		return after.pos, nil
	}
	key := SlotKey(l.s.cell, l.epoch, upTo)
	f, _, err := l.s.read(ctx, key)
	switch {
	case err != nil:
		return 0, err
	case f == nil || f.Kind != KindRecords:
		return 0, errcode.Errorf(errcode.CodeCorruptTx, "corrupt log: %s should hold records", key)
	}
	return f.NextPos(), nil
}

// Restore rebuilds the state this log starts from: the newest snapshot,
// then every record up to Start().NextPos. It fails if the chain ends
// before that (a race with GC: call it again).
func (l *Log) Restore(ctx context.Context, onSnapshot func(Snapshot) error, onRecord func(Record) error) error {
	h, err := l.s.restore(ctx, l.epoch, l.start.NextPos, onSnapshot, onRecord)
	if err == nil && h.NextPos < l.start.NextPos {
		err = errcode.Errorf(errcode.CodeUnavailable, "chain ended at position %d before the log's start %d: %w", h.NextPos, l.start.NextPos, errGCRace)
	}
	return errcode.Wrap(err, "restore %s", l.s.cell)
}

// GCOptions configure GC.
type GCOptions struct {
	// DryRun reports what would be deleted and deletes nothing.
	DryRun bool
	// DropKeyWindow deletes the record files of the idempotency window
	// too (GC keeps them otherwise): a keyed append retried after that, on
	// an owner that did not see it land, is appended again.
	DropKeyWindow bool
	// Below, when not 0, bounds the record files deleted to those at slots
	// below it (and the rules above still apply): a trim deletes only
	// files wholly below its trim point, Below being the slot of the file
	// that holds the trim point (slots order positions: no slot holds two
	// epochs' records).
	Below TxID
	// Pace, when set, is called before each delete and may wait (a rate
	// bound) or end GC early with its error.
	Pace func(context.Context) error
}

// GCReport says what GC deleted (or would delete, in a dry run).
type GCReport struct {
	// Snapshot is the key of the newest snapshot, which GC keeps and bases
	// every decision on; "" when the cell has none (then nothing is deleted).
	Snapshot string
	// Deleted lists the deleted keys: older snapshots first, then record
	// files in txid order.
	Deleted []string
	Bytes   int64 // the size of the deleted files
	// Markers counts the seals and tombstones seen; GC never deletes them
	// (nor announcement markers).
	Markers int
	// Strays lists the keys under the cell's log prefix that deed did not
	// write (other names, epochs, padding or case), sorted: every walk
	// ignores them and GC never deletes them.
	Strays []string
	DryRun bool
}

// keyWindowStart is the lowest slot GC keeps so that a new owner can still
// learn the idempotency keys of the window (WithIdempotencyWindow): the
// record files of the last limit slots whose timestamp is within the
// window's age of the newest. Timestamps never decrease along the chain, so
// a binary search over the listed files finds it in a few GETs; a log
// without timestamps (written before them) keeps nothing for it.
func (s *store) keyWindowStart(ctx context.Context, l listing) (TxID, error) {
	tops := l.tops(^uint64(0))
	var tail *File
	var tailAt TxID
	for i, tries := len(tops)-1, 0; i >= 0 && tries < 8 && tail == nil; i, tries = i-1, tries+1 {
		f, err := s.probe(ctx, tops[i].key)
		if err != nil {
			return 0, err
		}
		if f != nil && f.Kind == KindRecords {
			tail, tailAt = f, tops[i].txid
		}
	}
	if tail == nil || tail.TS == 0 {
		return ^TxID(0), nil
	}
	cutoff := tail.TS - s.cfg.keyWindow.Milliseconds()
	lowest := TxID(0)
	if uint64(tailAt)+1 > uint64(s.cfg.keyLimit) {
		lowest = tailAt + 1 - TxID(s.cfg.keyLimit)
	}
	lo := sort.Search(len(tops), func(i int) bool { return tops[i].txid >= lowest })
	hi := len(tops)
	for lo < hi { // the first listed file at or after the cutoff
		mid := (lo + hi) / 2
		f, err := s.probe(ctx, tops[mid].key)
		if err != nil {
			return 0, err
		}
		if f != nil && f.TS >= cutoff {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo == len(tops) {
		return tailAt, nil
	}
	return tops[lo].txid, nil
}

// GC deletes what the newest snapshot makes redundant: every older
// snapshot, and every record file at or below the snapshot's txid S in a
// sealed epoch — an epoch below the snapshot's epoch, or the snapshot's
// epoch itself once a seal or tombstone ends it — except the record files
// of the idempotency window (see WithIdempotencyWindow; options set it),
// which a new owner reads to learn the keys. It never deletes a seal or
// a tombstone (they keep a paused owner fenced forever), never a file above
// S, and never a record of an epoch that may still be writing.
//
// Order matters for walkers running meanwhile: older snapshots go first,
// then record files in txid order, so a walk that meets a hole GC made
// finds its own starting file gone as well and starts again instead of
// sealing the hole.
//
// The snapshot is read and verified first; a damaged one (DEED-E031) stops
// GC before it deletes anything.
func GC(ctx context.Context, b bucket.Bucket, cell string, opts GCOptions, options ...Option) (GCReport, error) {
	rep := GCReport{DryRun: opts.DryRun}
	if err := validCell(cell); err != nil {
		return rep, err
	}
	s := newStore(b, cell, options)
	l, err := s.listLog(ctx)
	if err != nil {
		return rep, errcode.Wrap(err, "gc %s", cell)
	}
	rep.Strays = slices.Sorted(slices.Values(l.strays))
	snap, ok := l.newestSnapshot(^uint64(0))
	if !ok {
		return rep, nil
	}
	f, _, err := s.read(ctx, snap.key)
	if err != nil {
		return rep, errcode.Wrap(err, "gc %s", cell)
	}
	if f == nil {
		return rep, errcode.Errorf(errcode.CodeUnavailable, "gc %s: snapshot %s vanished: another GC is running", cell, snap.key)
	}
	rep.Snapshot = snap.key
	S, Xs := snap.txid, snap.epoch

	var victims []listed
	for _, o := range l.snaps {
		if o.key != snap.key && (o.txid < S || (o.txid == S && o.epoch < Xs)) {
			victims = append(victims, o)
		}
	}
	sealed, err := s.epochSealed(ctx, l, Xs)
	if err != nil {
		return rep, errcode.Wrap(err, "gc %s", cell)
	}
	keep := ^TxID(0)
	if !opts.DropKeyWindow {
		if keep, err = s.keyWindowStart(ctx, l); err != nil {
			return rep, errcode.Wrap(err, "gc %s", cell)
		}
	}
	for _, o := range l.files {
		if o.txid > S || o.epoch > Xs || (o.epoch == Xs && !sealed) || o.txid >= keep || (opts.Below != 0 && o.txid >= opts.Below && !brokenGCPastTrim) {
			continue
		}
		if o.size <= maxMarkerLen {
			// Small enough to be a seal or tombstone: look.
			g, _, err := s.read(ctx, o.key)
			if err != nil && errcode.CodeOf(err) != errcode.CodeCorruptTx {
				return rep, errcode.Wrap(err, "gc %s", cell)
			}
			if brokenGCMarkers && g != nil && g.Kind.fences() {
				victims = append(victims, o)
				continue
			}
			if g == nil || g.Kind != KindRecords {
				if g != nil || err != nil {
					rep.Markers++ // a marker, or damaged: keep it
				}
				continue
			}
		}
		victims = append(victims, o)
	}
	if brokenGCNewestFirst {
		newestFirst(victims)
	}
	for _, o := range victims {
		if opts.Pace != nil && !opts.DryRun {
			if err := opts.Pace(ctx); err != nil {
				return rep, errcode.Wrap(err, "gc %s", cell)
			}
		}
		if !opts.DryRun {
			if err := s.remove(ctx, o); err != nil {
				return rep, errcode.Wrap(err, "gc %s", cell)
			}
		}
		rep.Deleted = append(rep.Deleted, o.key)
		rep.Bytes += o.size
	}
	s.cfg.logger.Info("gc", "cell", cell, "snapshot", snap.key, "deleted", len(rep.Deleted), "dry_run", opts.DryRun)
	return rep, nil
}

// epochSealed reports whether epoch x is ended by a seal or tombstone: its
// highest listed .ltx file is one.
func (s *store) epochSealed(ctx context.Context, l listing, x uint64) (bool, error) {
	for i := len(l.files) - 1; i >= 0; i-- {
		if l.files[i].epoch != x {
			continue
		}
		f, _, err := s.read(ctx, l.files[i].key)
		if err != nil {
			return false, err
		}
		return f != nil && f.Kind.fences(), nil
	}
	return false, nil
}

// remove deletes one file, only the version that was listed when the store
// supports it.
func (s *store) remove(ctx context.Context, o listed) error {
	cond := bucket.IfMatch(o.etag)
	if o.etag == "" {
		cond = bucket.None
	}
	err := s.retry(ctx, readAttempts, func(ctx context.Context) error {
		err := s.b.Delete(ctx, o.key, cond)
		if errors.Is(err, bucket.ErrUnsupported) && cond.Conditional() {
			cond = bucket.None
			err = s.b.Delete(ctx, o.key, cond)
		}
		return err
	})
	if err == nil || errors.Is(err, bucket.ErrNotFound) || errors.Is(err, bucket.ErrPrecondition) {
		return nil
	}
	return err
}
