package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
)

// maxFenceAttempts bounds restarts of the fencing walk after a GC race.
const maxFenceAttempts = 5

// fence announces E, checks that E is still the cell's newest epoch, seals
// the predecessors and returns where E's chain starts. With prev (ok), the
// lease's claim replaced epoch E−1's release, which recorded where its
// chain was sealed: one read of that seal replaces the LIST and the walk
// (see sealedEnd), and none at all when the release was this node's own
// and its seal is known to have landed (prev.Own). Such a claim announced
// E in its own record (owner.Lease.AnnouncedByClaim), so there is no
// marker to write and nothing to re-check: every successor's claim comes
// after it and its walk counts E announced (see "A claim that announces
// its epoch" in docs/design.md).
func (l *Log) fence(ctx context.Context, prev owner.PrevEnd, ok bool) (Head, error) {
	if !l.lease.AnnouncedByClaim() {
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
	}
	if ok && prev.Epoch+1 == l.epoch {
		if prev.Own && prev.End.TxID != 0 && prev.End.Pos != 0 {
			// This node's own seal, known to have landed, on the release
			// the claim replaced with If-Match: seals are never deleted.
			l.lastTS = max(l.lastTS, prev.TS)
			return Head{Next: TxID(prev.End.TxID), NextPos: Pos(prev.End.Pos)}, nil
		}
		h, found, err := l.sealedEnd(ctx, prev)
		if err != nil || found {
			return h, err
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
		l.noteTS(a.file)
		var h Head
		h, err = l.fenceFrom(ctx, a, withUnmarked(ls.announced, l.lease.Unmarked(), l.epoch))
		if !errors.Is(err, errGCRace) {
			return h, err
		}
		l.s.cfg.logger.Info("fencing walk raced with GC; starting again", "cell", l.s.cell, "epoch", l.epoch)
	}
	return Head{}, errcode.Errorf(errcode.CodeUnavailable, "fence predecessors: %w", err)
}

// withUnmarked adds to a listing's announced epochs (ascending) the epoch
// u below E that the ownership record the claim replaced announced
// (owner.Record.Announces): it may write without a marker, so the walk
// must count it although the LIST may show nothing of it.
func withUnmarked(ann []uint64, u, E uint64) []uint64 {
	if u == 0 || u >= E || brokenWalkIgnoresUnmarked {
		return ann
	}
	i, found := slices.BinarySearch(ann, u)
	if found {
		return ann
	}
	return slices.Insert(slices.Clone(ann), i, u)
}

// sealedEnd checks the chain end a release recorded: epoch D = E−1 (whose
// release E's claim replaced with If-Match, so no epoch lies between) says
// its log sealed its chain at slot T, position P. The record is only a
// hint (anyone who can write own.json can write it), so the slot is read:
// a seal or tombstone at e<D>/<T> with position P is the end of D's chain,
// and since D's own fencing walk had sealed every epoch before it and D
// released with If-Match on its claim (nobody claimed in between), no
// epoch below E can write at T or after it. E starts at T. Anything else
// (missing, records, another position) is found false: walk as usual.
func (l *Log) sealedEnd(ctx context.Context, prev owner.PrevEnd) (Head, bool, error) {
	t, p := TxID(prev.End.TxID), Pos(prev.End.Pos)
	if t == 0 || p == 0 {
		return Head{}, false, nil
	}
	key := SlotKey(l.s.cell, prev.Epoch, t)
	var f *File
	var err error
	if prev.Read { // read with the claim (owner.PrevEnd.Read)
		if prev.Seal != nil {
			if f, err = Decode(key, prev.Seal); err != nil {
				f, _, err = l.s.read(ctx, key) // decide on a read of our own
			}
		}
	} else {
		f, _, err = l.s.read(ctx, key)
	}
	if err != nil {
		return Head{}, false, err
	}
	if !brokenTrustEnd && (f == nil || !f.Kind.fences() || f.Epoch != prev.Epoch || f.TxID != t || f.Pos != p) {
		l.s.cfg.logger.Info("the released chain end is not sealed as recorded; walking", "cell", l.s.cell, "epoch", l.epoch, "end_epoch", prev.Epoch, "txid", uint64(t))
		return Head{}, false, nil
	}
	if f != nil {
		l.noteTS(f)
	}
	return Head{Next: t, NextPos: p}, true, nil
}

// noteTS raises the log's timestamp floor to f's: a file the fencing walk
// read (a record, or a seal or tombstone carrying the newest timestamp its
// writer had fenced). Called only while the log opens.
func (l *Log) noteTS(f *File) {
	if f != nil && f.TS > l.lastTS {
		l.lastTS = f.TS
	}
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
	err := l.s.retry(ctx, readAttempts, func(ctx context.Context) error {
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
	s, E := &l.s, l.epoch
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
			l.noteTS(f)
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
			if y >= E || brokenNoSeal || brokenNoTombstones {
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
			l.noteTS(f)
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
	s, E := &l.s, l.epoch
	key := SlotKey(s.cell, c.epoch, c.txid)
	if brokenNoSeal {
		return &File{Kind: kind, Epoch: c.epoch, TxID: c.txid, Pos: c.pos, By: E}, nil
	}
	f := &File{Kind: kind, Epoch: c.epoch, TxID: c.txid, Token: l.lease.Token(), Pos: c.pos, By: E, TS: l.lastTS}
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
		l.noteTS(f)
		c, _, _ = step(c, f)
		key = SlotKey(l.s.cell, l.epoch, c.txid)
		var err error
		if f, _, err = l.s.read(ctx, key); err != nil {
			return Head{}, err
		}
	}
}
