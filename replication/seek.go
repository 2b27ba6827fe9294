package replication

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
)

// seekPage is the size of the first page of the log a read by a
// non-holder lists. A log that fits in it is located from that page, as
// from a whole listing; a longer one is sought (see seek), so that a read
// costs requests in the logarithm of the log's length, not in its length.
// Tests set it lower, to seek in short logs, or to 0, to locate from a
// whole listing as every read did before seek.
var seekPage = 1000

// seekFirstKeys is the page size of a LIST for the first files of one
// epoch: a snapshot or two can sort before its first record file.
const seekFirstKeys = 8

// seekFirstPages bounds the pages seekFirst follows in one epoch; past it
// the epoch counts as holding no record, which costs the walk reads, never
// correctness (any record at or before the position is a valid start).
const seekFirstPages = 4

// locateBounded is locate for a read that must not list the whole log. It
// lists one page of the log; if that is the whole log, it locates from it
// as locate does; a log of many short epochs it may list on, a bounded
// number of pages. Otherwise it seeks the record file holding position
// after+1 (see seek) and, when the position is below every record it
// finds and no snapshot sits just below the first (see compacted), or the
// log has no record, falls back to locate.
func (s *store) locateBounded(ctx context.Context, after Pos) (anchor, *announced, error) {
	if seekPage <= 0 {
		return s.locate(ctx, after)
	}
	prefix := LogPrefix(s.cell)
	first, err := s.listPage(ctx, bucket.ListInput{Prefix: prefix, MaxKeys: seekPage})
	if err != nil {
		return anchor{}, nil, err
	}
	if first.NextToken == "" {
		return s.locateIn(ctx, parseListing(prefix, first.Objects), after)
	}
	ann, withFiles, err := s.listEpochs(ctx, first)
	if err != nil {
		return anchor{}, nil, err
	}
	// A log of many epochs with few files each takes fewer LISTs to list
	// whole than to seek (about 2 + log₂ of its epochs): estimate its
	// length from the first page and list it on, but only as many pages
	// as seeking would cost; past them, seek.
	if budget := 2 + bits.Len(uint(len(withFiles))); estimatePages(prefix, first, len(withFiles)) <= budget {
		objects := first.Objects
		in := bucket.ListInput{Prefix: prefix, Token: first.NextToken}
		for range budget {
			page, err := s.listPage(ctx, in)
			if err != nil {
				return anchor{}, nil, err
			}
			objects = append(objects, page.Objects...)
			if page.NextToken == "" {
				return s.locateIn(ctx, parseListing(prefix, objects), after)
			}
			in.Token = page.NextToken
		}
	}
	a, ok, err := s.seek(ctx, after+1, withFiles)
	if err != nil {
		return anchor{}, nil, err
	}
	if !ok {
		return s.locate(ctx, after)
	}
	return a, ann, nil
}

// estimatePages estimates how many more pages (of 1,000 keys, S3's) a
// listing of the whole log takes after its first page, first: from the
// number of epochs with files and the files per epoch in the first page.
// The page begins at the log's first key, so every epoch in it is whole
// but the last, which may go on in the next page. With a single epoch in
// the page it cannot tell, and says the log is long.
func estimatePages(prefix string, first bucket.ListPage, epochs int) int {
	var counts []int
	last := ""
	for _, o := range first.Objects {
		rest := strings.TrimPrefix(o.Key, prefix)
		i := strings.IndexByte(rest, '/')
		if !strings.HasPrefix(rest, "e") || i < 0 {
			continue
		}
		if rest[:i] != last {
			last = rest[:i]
			counts = append(counts, 0)
		}
		counts[len(counts)-1]++
	}
	if len(counts) < 2 {
		return math.MaxInt
	}
	whole := 0
	for _, c := range counts[:len(counts)-1] {
		whole += c
	}
	keys := float64(whole) / float64(len(counts)-1) * float64(epochs)
	return int(math.Ceil((keys - float64(len(first.Objects))) / 1000))
}

// listPage lists one page, retrying its transient errors.
func (s *store) listPage(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	page, err := retryingList{s.b, s}.List(ctx, in)
	if err != nil {
		return page, errcode.Wrap(err, "list %s", in.Prefix)
	}
	return page, nil
}

// listEpochs finds the announced epochs a walk scans (as listLog does:
// every epoch with an announcement marker or a file) without listing the
// files: the markers (already in first, the log's first page, when it
// reaches past them: they sort before the epochs' prefixes), and the
// epochs' prefixes, listed with the delimiter '/'. withFiles is the epochs
// with a prefix, ascending. A prefix holding only strays counts as an
// epoch too: the walk then reads a slot there that is missing, one GET,
// and goes on as it would without it.
func (s *store) listEpochs(ctx context.Context, first bucket.ListPage) (ann *announced, withFiles []uint64, err error) {
	prefix := LogPrefix(s.cell)
	markers := first.Objects
	// Every key ≥ "announce0" sorts after every marker ('0' follows '/').
	if n := len(markers); n == 0 || markers[n-1].Key < prefix+"announce0" {
		page, err := s.list(ctx, bucket.ListInput{Prefix: prefix + announceDir})
		if err != nil {
			return nil, nil, err
		}
		markers = page.Objects
	}
	epochs := map[uint64]bool{}
	for _, o := range markers {
		if e, ok := parseAnnounce(strings.TrimPrefix(o.Key, prefix)); ok {
			epochs[e] = true
		}
	}
	page, err := s.list(ctx, bucket.ListInput{Prefix: prefix, Delimiter: "/"})
	if err != nil {
		return nil, nil, err
	}
	for _, p := range page.Prefixes {
		name, ok := strings.CutPrefix(p, prefix+"e")
		if !ok {
			continue
		}
		if e, ok := canonicalEpoch(strings.TrimSuffix(name, "/")); ok && strings.HasSuffix(name, "/") {
			withFiles = append(withFiles, e)
			epochs[e] = true
		}
	}
	slices.Sort(withFiles)
	withFiles = slices.Compact(withFiles) // a store may repeat prefixes across pages
	if !brokenNoImplicitEpoch1 {
		epochs[1] = true // see implicitEpoch1
	}
	ann = &announced{}
	for e := range epochs {
		ann.epochs = append(ann.epochs, e)
	}
	slices.Sort(ann.epochs)
	if brokenReaderStaleList {
		ann.epochs = staleAnnounced(s.cell, ^uint64(0), ann.epochs)
	}
	return ann, withFiles, nil
}

// epochFirst is the first record file of one epoch's listing.
type epochFirst struct {
	key  string
	txid TxID
	f    *File // nil: the epoch's first files hold no record
}

// seek finds the record file holding position want, or the nearest record
// file before it, among the epochs with files (ascending), in requests
// logarithmic in the log's length. The chain runs in (epoch, txid) order —
// a successor continues at a higher epoch, always at a higher txid — and
// positions grow along it, so:
//
//   - the epoch is found by a binary search over the epochs' first record
//     files (each probe: one LIST of a few keys, one GET);
//   - within that epoch, record files sit at consecutive txids from its
//     first one (t0, position p0), each with at least one record, so want
//     is at a txid ≤ t0 + (want − p0): a binary search by GET of known
//     keys below that bound finds it, and with one record per file the
//     first GET does.
//
// Nothing seek concludes needs more than a start at or before want on the
// chain; the walk from it verifies every position. ok is false when no
// record file at or before want was found: the caller locates from a whole
// listing instead, which knows the snapshots. A file GC deletes under the
// search makes it start lower (a GET that finds nothing counts as past
// the epoch's end), and the walk that meets the hole finds its start gone
// as well (GC deletes in txid order): errGCRace.
func (s *store) seek(ctx context.Context, want Pos, epochs []uint64) (anchor, bool, error) {
	firsts := make([]*epochFirst, len(epochs))
	first := func(i int) (*epochFirst, error) {
		if firsts[i] == nil {
			r, err := s.seekFirst(ctx, epochs[i])
			if err != nil {
				return nil, err
			}
			firsts[i] = r
		}
		return firsts[i], nil
	}
	best := -1
	lo, hi := 0, len(epochs)
	for lo < hi {
		mid := (lo + hi) / 2
		// The nearest epoch at or below mid with a record (an epoch can
		// hold only the seals and tombstones its successors put there).
		var r *epochFirst
		j := mid
		for ; j >= lo; j-- {
			var err error
			if r, err = first(j); err != nil {
				return anchor{}, false, err
			}
			if r.f != nil {
				break
			}
		}
		switch {
		case j < lo:
			lo = mid + 1
		case r.f.Pos <= want:
			best = j
			lo = mid + 1
		default:
			hi = j
		}
	}
	if best < 0 {
		return s.compacted(ctx, want, epochs, firsts)
	}
	e, r := epochs[best], firsts[best]
	key, t, f := r.key, r.txid, r.f
	if f.NextPos() <= want {
		// probe returns the record file at t when it is one with a
		// position ≤ want; corrupt files are skipped downwards to lo.
		probe := func(t, lo TxID) (string, TxID, *File, bool, error) {
			for ; t > lo; t-- {
				k := SlotKey(s.cell, e, t)
				g, _, err := s.read(ctx, k)
				if errcode.CodeOf(err) == errcode.CodeCorruptTx {
					continue
				}
				if err != nil {
					return "", 0, nil, false, err
				}
				if g == nil || g.Kind != KindRecords || g.Pos > want {
					return "", t, nil, false, nil
				}
				return k, t, g, true, nil
			}
			return "", t, nil, false, nil
		}
		lo, hi := t, t+TxID(min(uint64(want-f.Pos), uint64(^TxID(0)-t-1)))+1
		// hi is just past the bound. Gallop down from it (the bound
		// itself, then 2, 4, … 256 below), since a file holds one record
		// most often and a read at the log's end is the most common;
		// bisect once a probe lands at or before want.
		gallop, step := true, TxID(1)
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if gallop {
				mid = hi - step
			}
			k, at, g, ok, err := probe(mid, lo)
			if err != nil {
				return anchor{}, false, err
			}
			if ok {
				key, t, f = k, at, g
				lo, gallop = mid, false
			} else {
				hi = max(at, lo+1)
				// Double while the next probe stays above lo (no
				// overflow: step ≤ (hi − lo)/2), 8 times at most: a
				// position far past the end is bisected for.
				if gallop = gallop && step <= (hi-lo-1)/2 && step < 1<<8; gallop {
					step *= 2
				}
			}
		}
	}
	return anchor{at: cursor{epoch: e, txid: t + 1, pos: f.NextPos(), data: true}, key: key, file: f, sought: epochs}, true, nil
}

// seekCompactedEpochs bounds the epochs compacted probes for a snapshot.
const seekCompactedEpochs = 16

// compacted is seek's answer when every record file it found is past
// want: the positions before them were compacted (or the log has none).
// GC deletes the record files up to a snapshot's txid S, so the first one
// left is often at S+1: compacted looks for a snapshot at the txid below
// the lowest record file found, in that file's epoch and the ones above
// (each one GET), and if one covers want, starts from it, which the read
// answers with ErrCompacted. Otherwise ok is false: the caller locates
// from a whole listing.
func (s *store) compacted(ctx context.Context, want Pos, epochs []uint64, firsts []*epochFirst) (anchor, bool, error) {
	low := -1
	for i, r := range firsts {
		if r != nil && r.f != nil {
			low = i
			break
		}
	}
	if low < 0 || firsts[low].txid <= 1 {
		return anchor{}, false, nil
	}
	t := firsts[low].txid - 1
	for _, e := range epochs[low:min(len(epochs), low+seekCompactedEpochs)] {
		key := SnapshotKey(s.cell, e, t)
		f, err := s.probe(ctx, key)
		if err != nil {
			return anchor{}, false, err
		}
		if f != nil && f.Kind == KindSnapshot && f.Pos > want {
			return anchor{at: cursor{epoch: e, txid: t + 1, pos: f.Pos}, key: key, file: f, sought: epochs}, true, nil
		}
	}
	return anchor{}, false, nil
}

// seekFirst reads the first record file of epoch e, from a LIST of the
// epoch's first keys. Record files come before the seals and tombstones
// other claimers put in an epoch (those sit above its last record), so
// the first file that is not a snapshot decides: a record, or none.
func (s *store) seekFirst(ctx context.Context, e uint64) (*epochFirst, error) {
	prefix := LogPrefix(s.cell)
	in := bucket.ListInput{Prefix: EpochPrefix(s.cell, e), MaxKeys: seekFirstKeys}
	for range seekFirstPages {
		page, err := s.listPage(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, o := range page.Objects {
			k, ok := parseLogName(strings.TrimPrefix(o.Key, prefix))
			if !ok || k.snapshot || k.epoch != e {
				continue
			}
			f, err := s.probe(ctx, o.Key)
			if err != nil {
				return nil, err
			}
			if f == nil || f.Kind != KindRecords {
				return &epochFirst{}, nil
			}
			return &epochFirst{key: o.Key, txid: k.txid, f: f}, nil
		}
		if page.NextToken == "" {
			break
		}
		in.Token = page.NextToken
	}
	return &epochFirst{}, nil
}

// snapshotFrom is the check a walk from a sought anchor makes where it
// ends, at slot end of epoch: the walk knows no snapshot from before it (a
// whole listing would have shown the newest), so it lists, in every epoch
// ≥ epoch with files, the keys from txid end on. A snapshot there covers
// slot end, so the slot held a record once and the end is a hole: GC ran
// under the read (or the holder wrote and snapshotted past it meanwhile),
// errGCRace, and the read starts again from a whole listing. Epochs below
// are not listed: an owner snapshots only what it wrote or read, and an
// epoch below the walk's was sealed before the chain reached slot end.
func (s *store) snapshotFrom(ctx context.Context, epochs []uint64, epoch uint64, end TxID) error {
	prefix := LogPrefix(s.cell)
	for _, e := range epochs {
		if e < epoch {
			continue
		}
		in := bucket.ListInput{Prefix: EpochPrefix(s.cell, e), StartAfter: EpochPrefix(s.cell, e) + fmt.Sprintf("%016x", uint64(end))}
		for pages := 0; ; pages++ {
			if pages == seekFirstPages {
				// Thousands of files past the chain's end: not the log
				// seek expects; let a whole listing decide.
				return errGCRace
			}
			page, err := s.listPage(ctx, in)
			if err != nil {
				return err
			}
			for _, o := range page.Objects {
				if k, ok := parseLogName(strings.TrimPrefix(o.Key, prefix)); ok && k.snapshot && k.epoch == e && k.txid >= end {
					return errGCRace
				}
			}
			if page.NextToken == "" {
				break
			}
			in.Token = page.NextToken
		}
	}
	return nil
}
