package replication

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
)

// cursor is a place in the chain walk: the slot (epoch, txid) to read next
// and the position its first record must carry.
type cursor struct {
	epoch uint64
	txid  TxID
	pos   Pos
	// data is true when the previous step read a record of this epoch, so
	// that a missing slot here is the end of an epoch with data (a seal
	// closes it) rather than a gap above a seal (a tombstone does).
	data bool
}

// origin is where a chain without a snapshot starts: a virtual seal at
// slot 1 of epoch 0, so the chain continues at slot 1 of the first
// announced epoch that holds a record there.
var origin = cursor{epoch: 0, txid: 1, pos: 1}

// step is the restore rule for one slot, as a pure function: given the
// file found at c (nil: missing), where does the chain go?
//
//   - a record continues at the next slot of the same epoch;
//   - a seal or tombstone (or the virtual seal of origin) means: scan
//     slot c.txid of the announced epochs above c.epoch (see successor);
//   - a missing slot after a record ends the chain.
//
// The epoch named inside a seal is never followed: two claimers can race on
// one tombstone, so the epoch it names may start later than this slot.
func step(c cursor, f *File) (next cursor, scan, end bool) {
	switch {
	case f == nil:
		return c, false, true
	case f.Kind == KindRecords:
		return cursor{epoch: c.epoch, txid: c.txid + 1, pos: f.NextPos(), data: true}, false, false
	default: // seal or tombstone
		return c, true, false
	}
}

// checkPos verifies that a record file carries the position the chain
// expects at it; anything else is a damaged log.
func checkPos(key string, f *File, c cursor) error {
	if f.Kind == KindRecords && f.Pos != c.pos {
		return errcode.Errorf(errcode.CodeCorruptTx, "corrupt transaction file %s: first position %d, the chain expects %d", key, f.Pos, c.pos)
	}
	return nil
}

// announced is the set of announced epochs a walk scans at a seal: every
// epoch with an announcement marker, and (for buckets written before
// announcements existed) every epoch whose prefix holds any file deed
// writes. Stray keys count for nothing. A walk takes it from a LIST made
// during the walk, never from one made before it began: an epoch that
// announced since would be missing.
type announced struct {
	epochs []uint64 // ascending, no duplicates
}

// above returns the epochs of a greater than x, in order.
func (a *announced) above(x uint64) []uint64 {
	i := sort.Search(len(a.epochs), func(i int) bool { return a.epochs[i] > x })
	return a.epochs[i:]
}

// listAnnounced lists the log for its announced epochs.
func (s *store) listAnnounced(ctx context.Context) (*announced, error) {
	l, err := s.listLog(ctx)
	if err != nil {
		return nil, err
	}
	return &announced{epochs: l.announced}, nil
}

// successor is the restore rule at a seal or tombstone in epoch c.epoch at
// slot c.txid: the chain continues at slot c.txid of the first announced
// epoch above c.epoch that holds a record there. Seals, tombstones and
// missing slots are skipped alike: an epoch can announce, lose its
// re-check of the ownership record and never write. The chain ends here
// (found is false) only if no announced epoch above holds a record. ann
// nil is listed now.
func (s *store) successor(ctx context.Context, c cursor, ann **announced) (epoch uint64, f *File, found bool, err error) {
	if *ann == nil {
		if *ann, err = s.listAnnounced(ctx); err != nil {
			return 0, nil, false, err
		}
	}
	for _, y := range (*ann).above(c.epoch) {
		key := SlotKey(s.cell, y, c.txid)
		g, _, err := s.read(ctx, key)
		if err != nil {
			return 0, nil, false, err
		}
		if g != nil && g.Kind == KindRecords {
			if err := checkPos(key, g, c); err != nil {
				return 0, nil, false, err
			}
			return y, g, true, nil
		}
		if g == nil && brokenReaderStopsAtMissing {
			break
		}
	}
	return 0, nil, false, nil
}

// walk reads the chain from c in slot order, calling visit for every record
// file, until the chain ends or visit returns false. It returns the cursor
// where it stopped and whether that is the end of the chain. Within an
// epoch it needs no LIST: every step is one GET of a known key, and the
// next keys are read ahead, several at once (see readAhead). At a seal it
// scans the announced epochs of ann (nil: listed at the first seal).
func (s *store) walk(ctx context.Context, c cursor, ann *announced, visit func(key string, f *File) (bool, error)) (cursor, bool, error) {
	ra := s.readAhead(ctx)
	defer ra.close()
	for {
		var f *File
		key := SlotKey(s.cell, c.epoch, c.txid)
		if c.epoch != 0 {
			var err error
			if f, err = ra.read(c); err != nil {
				return c, false, err
			}
			if f != nil {
				if err := checkPos(key, f, c); err != nil {
					return c, false, err
				}
			}
		}
		scan := c.epoch == 0
		if !scan {
			var end bool
			var next cursor
			next, scan, end = step(c, f)
			if end {
				return c, true, nil
			}
			if !scan {
				c = next
				if visit != nil {
					more, err := visit(key, f)
					if err != nil || !more {
						return c, false, err
					}
				}
				continue
			}
		}
		if brokenPointer && f != nil && f.By > c.epoch {
			c.epoch = f.By // the broken rule: follow the seal's epoch
			continue
		}
		y, g, found, err := s.successor(ctx, c, &ann)
		if err != nil {
			return c, false, err
		}
		if !found {
			return c, true, nil
		}
		key = SlotKey(s.cell, y, c.txid)
		c = cursor{epoch: y, txid: c.txid + 1, pos: g.NextPos(), data: true}
		if visit != nil {
			more, err := visit(key, g)
			if err != nil || !more {
				return c, false, err
			}
		}
	}
}

// listed is one .ltx or .snapshot file seen in a listing.
type listed struct {
	fileKey
	key  string
	size int64
	etag string
}

// listing is a LIST of a cell's log: a hint for where to start reading, and
// the announced epochs. Nothing is concluded from what a listing lacks
// about files; everything taken from it is verified by reading the file.
type listing struct {
	files []listed // .ltx files, by (txid, epoch)
	snaps []listed // .snapshot files, by (txid, epoch)
	// announced is every epoch with an announcement marker or any file,
	// ascending. Markers themselves are not files: no walk reads them and
	// GC never deletes them.
	announced []uint64
	// strays are the keys under the log prefix deed did not write (other
	// names, epochs or padding): ignored by every walk, kept by GC, and
	// reported by a GC dry run.
	strays []string
}

func (s *store) listLog(ctx context.Context) (listing, error) {
	prefix := LogPrefix(s.cell)
	page, err := s.list(ctx, bucket.ListInput{Prefix: prefix})
	if err != nil {
		return listing{}, err
	}
	return parseListing(prefix, page.Objects), nil
}

// implicitEpoch1: every listing counts epoch 1 announced, marker or not.
// Epoch 1 is claimed only by creating own.json, so it has no predecessor,
// and its log starts writing at slot 1 without an announcement, a re-check
// or a walk (Open): the create-only PUT of its first slot is its fence.
// A successor's walk therefore scans slot 1 of epoch 1 at the origin like
// any announced epoch's: it finds epoch 1's records there, or tombstones
// the slot so that a late first write of epoch 1 is refused. A reader
// scans it too: a missing slot costs one GET and is skipped.
//
// parseListing makes a listing of the objects of a whole LIST of the log
// prefix.
func parseListing(prefix string, objects []bucket.Info) listing {
	var l listing
	epochs := map[uint64]bool{}
	for _, o := range objects {
		rest, ok := strings.CutPrefix(o.Key, prefix)
		if !ok {
			continue
		}
		if e, ok := parseAnnounce(rest); ok {
			epochs[e] = true
			continue
		}
		k, ok := parseLogName(rest)
		if !ok {
			l.strays = append(l.strays, o.Key)
			continue
		}
		epochs[k.epoch] = true
		f := listed{fileKey: k, key: o.Key, size: o.Size, etag: o.ETag}
		if k.snapshot {
			l.snaps = append(l.snaps, f)
		} else {
			l.files = append(l.files, f)
		}
	}
	if !brokenNoImplicitEpoch1 {
		epochs[1] = true // see implicitEpoch1
	}
	for e := range epochs {
		l.announced = append(l.announced, e)
	}
	slices.Sort(l.announced)
	less := func(a, b listed) bool {
		if a.txid != b.txid {
			return a.txid < b.txid
		}
		return a.epoch < b.epoch
	}
	sort.Slice(l.files, func(i, j int) bool { return less(l.files[i], l.files[j]) })
	sort.Slice(l.snaps, func(i, j int) bool { return less(l.snaps[i], l.snaps[j]) })
	return l
}

// newestSnapshot is the listed snapshot with the highest (txid, epoch) in
// epochs ≤ maxEpoch.
func (l listing) newestSnapshot(maxEpoch uint64) (listed, bool) {
	for i := len(l.snaps) - 1; i >= 0; i-- {
		if l.snaps[i].epoch <= maxEpoch {
			return l.snaps[i], true
		}
	}
	return listed{}, false
}

// tops returns, per txid, the listed .ltx file of the highest epoch ≤
// maxEpoch, in txid order. Only that file can hold a record: a record at
// (R, t) is written after every lower epoch that could write t was fenced
// there, and no claimer puts a seal or tombstone above R at t without
// first reading R's record there and moving on.
func (l listing) tops(maxEpoch uint64) []listed {
	var out []listed
	for _, f := range l.files {
		if f.epoch > maxEpoch {
			continue
		}
		if n := len(out); n > 0 && out[n-1].txid == f.txid {
			out[n-1] = f
			continue
		}
		out = append(out, f)
	}
	return out
}

// anchor is where a walk starts, and the object whose disappearance tells
// that GC ran under the walk.
type anchor struct {
	at   cursor
	key  string // the record or snapshot the walk started from; "" at origin
	file *File  // that file, decoded (nil at origin)
	// covered is the txid of the newest snapshot the listing that chose
	// the anchor showed (0: none). The chain runs past every txid a
	// snapshot covers, so a walk that ends at or below it met a file GC
	// deleted, whatever stillValid says: a PUT that was still travelling
	// when its writer gave up on it can land after GC deleted the file,
	// and create-only does not stop it, so the anchor can be back although
	// the slot above it is gone.
	covered TxID
	// sought is set on an anchor seek found without a whole listing: the
	// epochs with files, ascending. Such an anchor has no covered; the
	// walk's end is checked by snapshotFrom instead.
	sought []uint64
}

// errGCRace reports that the file a walk started from was deleted while it
// walked, so the missing slot it ended at may be a hole left by GC.
var errGCRace = errors.New("the log was garbage-collected under the walk")

// stillValid reports whether a missing slot met by a walk from a is the real
// end of the chain rather than a file GC deleted meanwhile. GC deletes older
// snapshots first and record files in txid order, so if the slot was
// deleted, a's file (older snapshot, or a record below the hole) was
// deleted before it. At origin, GC can only have run if a snapshot exists.
//
// Two assumptions, both about the store. At origin the answer is a LIST
// made after the hole was seen, so it needs LIST to be read-after-write
// consistent (S3's is): a listing that lags behind recent writes can hide
// the only snapshot, and the hole passes for the end of an empty chain.
// And a deleted file must stay deleted: a PUT still travelling after its
// writer gave up on it (the writer retried, and the retry landed) can land
// after GC deleted the file and write it again. Reads guard against that
// below any snapshot their listing showed (anchor.covered). A snapshot
// anchor is checked further (end is the slot the walk ended at): the same
// snapshot can be written again once GC deleted it (an owner snapshotting
// the same state twice sends one create-only PUT, which succeeds again once
// the key is free), so its presence proves little; but a snapshot with a
// txid ≥ end, in a LIST made now, proves that slot end held a record once,
// so the end is a hole. A walk whose own starting record is written again
// while it runs — a late PUT, a newer snapshot, a sealed epoch and GC, all
// within one walk — is not guarded.
func (s *store) stillValid(ctx context.Context, a anchor, end TxID) error {
	if a.key != "" {
		ok, err := s.head(ctx, a.key)
		if err == nil && !ok {
			err = errGCRace
		}
		if err != nil || a.file == nil || a.file.Kind != KindSnapshot {
			return err
		}
	}
	l, err := s.listLog(ctx)
	if err != nil {
		return err
	}
	for _, sn := range l.snaps {
		if a.key == "" || sn.txid >= end {
			return errGCRace
		}
	}
	return nil
}

// findAnchor picks the newest known point of the chain in epochs ≤
// maxEpoch: the newest record file (found from a listing, verified by
// reading it), else the newest snapshot, else the origin, as listing l
// shows it. Any record is a
// valid start — every record ever written is on the chain — so a stale
// listing costs reads, never correctness.
func (s *store) findAnchor(ctx context.Context, l listing, maxEpoch uint64) (anchor, error) {
	snap, hasSnap := l.newestSnapshot(maxEpoch)
	tops := l.tops(maxEpoch)
	for i, tries := len(tops)-1, 0; i >= 0 && tries < 8; i, tries = i-1, tries+1 {
		t := tops[i]
		if hasSnap && t.txid < snap.txid {
			break
		}
		f, err := s.probe(ctx, t.key)
		if err != nil {
			return anchor{}, err
		}
		if f != nil && f.Kind == KindRecords {
			return anchor{at: cursor{epoch: t.epoch, txid: t.txid + 1, pos: f.NextPos(), data: true}, key: t.key, file: f}, nil
		}
	}
	if hasSnap {
		return s.snapshotAnchor(ctx, snap)
	}
	return anchor{at: origin}, nil
}

// snapshotAnchor reads a snapshot and starts after it.
func (s *store) snapshotAnchor(ctx context.Context, snap listed) (anchor, error) {
	f, _, err := s.read(ctx, snap.key)
	if err != nil {
		return anchor{}, err
	}
	if f == nil {
		return anchor{}, errGCRace
	}
	return anchor{at: cursor{epoch: snap.epoch, txid: snap.txid + 1, pos: f.Pos}, key: snap.key, file: f}, nil
}

// probe reads a listed file to choose where to start. A damaged file is
// not a start (nil, no error): the walk that starts below it will meet it
// and stop there with DEED-E031.
func (s *store) probe(ctx context.Context, key string) (*File, error) {
	f, _, err := s.read(ctx, key)
	if errcode.CodeOf(err) == errcode.CodeCorruptTx {
		return nil, nil
	}
	return f, err
}
