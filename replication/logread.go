package replication

import (
	"context"
	"errors"
	"sort"

	"github.com/deedkit/deed/errcode"
)

// Read returns up to limit records after position after (limit ≤ 0: to the
// end). With barrier it is linearizable: first it checks, with one HEAD of
// the log's next slot, that no newer epoch has fenced this one — a
// successor writes nothing before it seals that slot — so the read reflects
// every write acknowledged anywhere before it began. If the slot is fenced,
// the lease ends and Read returns DEED-E021. A barrier read borrows the
// log's lease as Append does: an ended lease is refused with its code
// before anything is sent.
func (l *Log) Read(ctx context.Context, after Pos, limit int, barrier bool) ([]Record, error) {
	if barrier {
		if err := l.borrow(l.lease); err != nil {
			return nil, err
		}
		if err := l.barrier(ctx); err != nil {
			return nil, err
		}
	}
	if after == ^Pos(0) {
		return nil, nil // no position follows (and after+1 would wrap to 0)
	}
	var err error
	for attempt := 0; attempt < maxReadAttempts; attempt++ {
		var a anchor
		var ann *announced // from an index anchor: listed at the first seal
		var ok bool
		if a, ok, err = l.indexAnchor(ctx, after); err == nil {
			switch {
			case !ok && attempt == 0:
				a, ann, err = l.s.locateBounded(ctx, after) // positions of earlier epochs
			case !ok:
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

// Tail is where a cell's log ends, as its holder knows it.
type Tail struct {
	Head
	// TS is the newest timestamp the log wrote or fenced (0 if none): the
	// timestamp of the record before NextPos, or a predecessor's floor.
	TS int64
}

// Tail answers where the log ends, linearizably: as a barrier read, it
// borrows the log's lease and checks with one HEAD of the next slot that
// no newer epoch has fenced this one, so every append acknowledged
// anywhere before it began is below NextPos.
func (l *Log) Tail(ctx context.Context) (Tail, error) {
	if err := l.borrow(l.lease); err != nil {
		return Tail{}, err
	}
	if err := l.barrier(ctx); err != nil {
		return Tail{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return Tail{Head: Head{Next: l.next, NextPos: l.nextPos}, TS: l.lastTS}, nil
}
