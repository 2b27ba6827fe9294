package replication

import (
	"context"
	"errors"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
)

// Record is one record read back from the log.
type Record struct {
	Pos   Pos    // its position in the cell's log (1-based)
	Epoch uint64 // the epoch that wrote it
	TxID  TxID   // the slot of the transaction file that carries it
	TS    int64  // its timestamp (ms since the Unix epoch; 0 if written before timestamps)
	Data  []byte
}

// Snapshot is a stored snapshot: application state covering every txid ≤
// TxID, that is every record with a position below NextPos.
type Snapshot struct {
	Key     string
	Epoch   uint64
	TxID    TxID
	NextPos Pos
	State   []byte
}

// Head says where a chain ends: the first missing slot and the position
// the next record will get.
type Head struct {
	Next    TxID
	NextPos Pos
}

// ErrCompacted is wrapped by a read of positions that GC has deleted: they
// are covered by a snapshot; restore from it instead.
var ErrCompacted = errors.New("positions compacted into a snapshot")

// maxReadAttempts bounds restarts of a read that raced with GC.
const maxReadAttempts = 3

func validCell(cell string) error { return owner.ValidateName("cell", cell) }

// Read returns up to limit records with positions after after, in log
// order (limit ≤ 0: every record to the end of the chain). Any process may
// call it; it needs no lease.
//
// A LIST of the log only picks where to start (the record file holding
// position after+1, found by a binary search over the listed files); from
// there the chain is read slot by slot with the restore rule, so records
// the listing missed are still returned, and the chain ends at the first
// missing slot. Positions that GC deleted give an error wrapping
// ErrCompacted (DEED-E040); a damaged file gives DEED-E031 naming its key.
func Read(ctx context.Context, b bucket.Bucket, cell string, after Pos, limit int, opts ...Option) ([]Record, error) {
	if err := validCell(cell); err != nil {
		return nil, err
	}
	s := newStore(b, cell, opts)
	var err error
	for attempt := 0; attempt < maxReadAttempts; attempt++ {
		var a anchor
		var ann *announced
		if a, ann, err = s.locate(ctx, after); err == nil {
			var recs []Record
			recs, _, err = s.readFrom(ctx, a, ann, after, limit)
			if err == nil {
				return recs, nil
			}
		}
		if !errors.Is(err, errGCRace) {
			break
		}
	}
	return nil, errcode.Wrap(err, "read %s after %d", cell, after)
}

// readFrom collects records after `after` from anchor a, scanning the
// announced epochs of ann at seals (nil: listed at the first seal). The
// anchor's own file, when it is a record file, is included.
func (s *store) readFrom(ctx context.Context, a anchor, ann *announced, after Pos, limit int) ([]Record, Head, error) {
	var out []Record
	full := func() bool { return limit > 0 && len(out) >= limit }
	add := func(f *File) {
		for i, d := range f.Records {
			p := f.Pos + Pos(i)
			if p > after && !full() {
				out = append(out, Record{Pos: p, Epoch: f.Epoch, TxID: f.TxID, TS: f.TS, Data: d})
			}
		}
	}
	if a.file != nil && a.file.Kind == KindRecords {
		add(a.file)
	} else if a.file != nil && a.file.Kind == KindSnapshot && a.file.Pos > after+1 {
		return nil, Head{}, errcode.Errorf(errcode.CodeBadRequest, "read %s after %d: %w: snapshot %s starts at position %d", s.cell, after, ErrCompacted, a.key, a.file.Pos)
	}
	if full() {
		return out, Head{}, nil
	}
	c, end, err := s.walk(ctx, a.at, ann, func(_ string, f *File) (bool, error) {
		add(f)
		return !full(), nil
	})
	if err != nil {
		return nil, Head{}, err
	}
	if end {
		if c.txid <= a.covered {
			return nil, Head{}, errcode.Errorf(errcode.CodeBadRequest, "read %s after %d: %w: slot e%d/%d is gone, below a snapshot at txid %d", s.cell, after, ErrCompacted, c.epoch, uint64(c.txid), uint64(a.covered))
		}
		if err := s.stillValid(ctx, a, c.txid); err != nil {
			return nil, Head{}, err
		}
	}
	return out, Head{Next: c.txid, NextPos: c.pos}, nil
}

// locate finds an anchor at or before position after+1: the record file
// holding it, by binary search over the listed files (each probe one GET),
// else the newest snapshot, else the origin. It returns the listing's
// announced epochs too, for the walk that follows.
func (s *store) locate(ctx context.Context, after Pos) (anchor, *announced, error) {
	want := after + 1
	l, err := s.listLog(ctx)
	if err != nil {
		return anchor{}, nil, err
	}
	tops := l.tops(^uint64(0))
	var best *File
	var bestKey listed
	lo, hi := 0, len(tops)
	for lo < hi {
		mid := (lo + hi) / 2
		// The nearest record file at or below mid (seals and tombstones
		// sit only at the chain's old ends, so this scans a few at most).
		var f *File
		j := mid
		for ; j >= lo; j-- {
			if f, err = s.probe(ctx, tops[j].key); err != nil {
				return anchor{}, nil, err
			}
			if f != nil && f.Kind == KindRecords {
				break
			}
		}
		switch {
		case j < lo:
			lo = mid + 1
		case f.Pos <= want:
			best, bestKey = f, tops[j]
			lo = mid + 1
		default:
			hi = j
		}
	}
	snap, hasSnap := l.newestSnapshot(^uint64(0))
	if best != nil {
		a := anchor{at: cursor{epoch: bestKey.epoch, txid: bestKey.txid + 1, pos: best.NextPos(), data: true}, key: bestKey.key, file: best}
		if hasSnap {
			a.covered = snap.txid
		}
		return a, s.readerAnn(l), nil
	}
	if hasSnap {
		a, err := s.snapshotAnchor(ctx, snap)
		return a, s.readerAnn(l), err
	}
	return anchor{at: origin}, s.readerAnn(l), nil
}

// readerAnn is the announced epochs a read scans: those of listing l, made
// during the read.
func (s *store) readerAnn(l listing) *announced {
	if brokenReaderStaleList {
		return &announced{epochs: staleAnnounced(s.cell, ^uint64(0), l.announced)}
	}
	return &announced{epochs: l.announced}
}

// LatestSnapshot returns the newest snapshot of cell, or nil when it has
// none. It verifies the snapshot's checksum (DEED-E031 when damaged).
func LatestSnapshot(ctx context.Context, b bucket.Bucket, cell string, opts ...Option) (*Snapshot, error) {
	if err := validCell(cell); err != nil {
		return nil, err
	}
	s := newStore(b, cell, opts)
	for attempt := 0; ; attempt++ {
		l, err := s.listLog(ctx)
		if err != nil {
			return nil, errcode.Wrap(err, "find snapshot of %s", cell)
		}
		snap, ok := l.newestSnapshot(^uint64(0))
		if !ok {
			return nil, nil
		}
		f, _, err := s.read(ctx, snap.key)
		if err != nil {
			return nil, errcode.Wrap(err, "find snapshot of %s", cell)
		}
		if f == nil && attempt < maxReadAttempts {
			continue // deleted by GC meanwhile: a newer one exists
		}
		if f == nil {
			return nil, errcode.Errorf(errcode.CodeUnavailable, "find snapshot of %s: %w", cell, errGCRace)
		}
		return snapshotOf(snap.key, f), nil
	}
}

func snapshotOf(key string, f *File) *Snapshot {
	return &Snapshot{Key: key, Epoch: f.Epoch, TxID: f.TxID, NextPos: f.Pos, State: f.State}
}

// Restore rebuilds a cell's state: it reads the newest snapshot (if any)
// and hands it to onSnapshot, then hands every later record, in order, to
// onRecord, to the end of the chain. It reads only the snapshot and the
// files after it. Either callback may be nil. It returns where the chain
// ends.
//
// If GC deletes the files under a running restore, it fails with
// DEED-E011 rather than return a short chain; call it again.
func Restore(ctx context.Context, b bucket.Bucket, cell string, onSnapshot func(Snapshot) error, onRecord func(Record) error, opts ...Option) (Head, error) {
	if err := validCell(cell); err != nil {
		return Head{}, err
	}
	s := newStore(b, cell, opts)
	h, err := s.restore(ctx, ^uint64(0), 0, onSnapshot, onRecord)
	if err != nil {
		return Head{}, errcode.Wrap(err, "restore %s", cell)
	}
	return h, nil
}

// restore is Restore bounded to epochs ≤ maxEpoch; with until > 0 it stops
// before position until instead of at the end of the chain.
func (s *store) restore(ctx context.Context, maxEpoch uint64, until Pos, onSnapshot func(Snapshot) error, onRecord func(Record) error) (Head, error) {
	l, err := s.listLog(ctx)
	if err != nil {
		return Head{}, err
	}
	a := anchor{at: origin}
	if snap, ok := l.newestSnapshot(maxEpoch); ok {
		if a, err = s.snapshotAnchor(ctx, snap); err != nil {
			return Head{}, err
		}
		if onSnapshot != nil {
			if err := onSnapshot(*snapshotOf(snap.key, a.file)); err != nil {
				return Head{}, err
			}
		}
	}
	if until > 0 && a.at.pos >= until {
		return Head{Next: a.at.txid, NextPos: a.at.pos}, nil
	}
	c, end, err := s.walk(ctx, a.at, s.readerAnn(l), func(_ string, f *File) (bool, error) {
		for i, d := range f.Records {
			p := f.Pos + Pos(i)
			if until > 0 && p >= until {
				return false, nil
			}
			if onRecord != nil {
				if err := onRecord(Record{Pos: p, Epoch: f.Epoch, TxID: f.TxID, TS: f.TS, Data: d}); err != nil {
					return false, err
				}
			}
		}
		return until == 0 || f.NextPos() < until, nil
	})
	if err != nil {
		return Head{}, err
	}
	if end {
		if err := s.stillValid(ctx, a, c.txid); err != nil {
			if errors.Is(err, errGCRace) {
				return Head{}, errcode.Errorf(errcode.CodeUnavailable, "%w; restore again", err)
			}
			return Head{}, err
		}
	}
	return Head{Next: c.txid, NextPos: c.pos}, nil
}
