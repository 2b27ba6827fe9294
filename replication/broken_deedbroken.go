//go:build deedbroken

package replication

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
)

// A deedbroken build carries switches that break the protocol: it refuses
// to run outside a test binary, so that it can never be shipped or run as
// deed (make release-check also rejects any build tag).
func init() {
	if !testing.Testing() {
		panic("replication: built with the deedbroken tag, which exists only for the broken-variant tests (go test -tags deedbroken): never run or ship such a build")
	}
}

// The switches broken.go documents, as variables the setters below flip.
var (
	brokenNoSeal               bool
	brokenNoReadBack           bool
	brokenEarlyAck             bool
	brokenNoRecheck            bool
	brokenRecheckFirst         bool
	brokenListBeforeClaim      bool
	brokenReaderStaleList      bool
	brokenReaderStopsAtMissing bool
	brokenPointer              bool
	brokenNoTombstones         bool
	brokenGCNewestFirst        bool
	brokenGCMarkers            bool
	brokenHandoffAck           bool
	brokenForgetKeys           bool
	brokenReplayPos            bool
	brokenStaleMatch           bool
	brokenMismatchUnproved     bool
	brokenNoImplicitEpoch1     bool
	brokenTrustEnd             bool
	brokenWalkIgnoresUnmarked  bool
	brokenGCPastTrim           bool
	brokenTrimBlind            bool
)

// SetBrokenGCPastTrim makes a trim's GC ignore its bound (broken.go).
func SetBrokenGCPastTrim(on bool) (restore func()) { return set(&brokenGCPastTrim, on) }

// SetBrokenTrimBlind makes trim point writes unconditional (broken.go).
func SetBrokenTrimBlind(on bool) (restore func()) { return set(&brokenTrimBlind, on) }

// SetBrokenTrustEnd makes the next epoch start at the chain end a release
// recorded without reading the seal there (broken.go).
func SetBrokenTrustEnd(on bool) (restore func()) { return set(&brokenTrustEnd, on) }

// SetBrokenWalkIgnoresUnmarked makes the fencing walk leave out the epoch
// the replaced ownership record announced (Record.Announces).
func SetBrokenWalkIgnoresUnmarked(on bool) (restore func()) {
	return set(&brokenWalkIgnoresUnmarked, on)
}

// SetBrokenNoImplicitEpoch1 makes listings count epoch 1 announced only
// by its marker or files, while epoch 1 still writes without announcing
// (broken.go).
func SetBrokenNoImplicitEpoch1(on bool) (restore func()) { return set(&brokenNoImplicitEpoch1, on) }

// SetBrokenForgetKeys makes a new owner skip learning its predecessors'
// idempotency keys (broken.go).
func SetBrokenForgetKeys(on bool) (restore func()) { return set(&brokenForgetKeys, on) }

// SetBrokenReplayPos makes a rebuilt replay answer its file's first
// position (broken.go).
func SetBrokenReplayPos(on bool) (restore func()) { return set(&brokenReplayPos, on) }

// SetBrokenStaleMatch makes conditional appends judged when queued
// (broken.go).
func SetBrokenStaleMatch(on bool) (restore func()) { return set(&brokenStaleMatch, on) }

// SetBrokenMismatchUnproved makes a conditional append past the log's end
// refused without the read barrier (broken.go).
func SetBrokenMismatchUnproved(on bool) (restore func()) { return set(&brokenMismatchUnproved, on) }

// The switches of broken.go, for the simulation's tests that its checkers
// catch each broken rule. They exist only in builds with the deedbroken
// tag. Each returns a function that restores the previous setting; never
// flip one while a log is open.

// SetBrokenNoSeal makes a new owner skip sealing its predecessors.
func SetBrokenNoSeal(on bool) (restore func()) { return set(&brokenNoSeal, on) }

// SetBrokenNoReadBack makes slot writes trust the PUT's typed error instead
// of reading the slot back.
func SetBrokenNoReadBack(on bool) (restore func()) { return set(&brokenNoReadBack, on) }

// SetBrokenEarlyAck makes appends acknowledged before their PUT returns.
func SetBrokenEarlyAck(on bool) (restore func()) { return set(&brokenEarlyAck, on) }

func set(v *bool, on bool) func() {
	old := *v
	*v = on
	return func() { *v = old }
}

// SetBrokenNoRecheck makes a new owner skip re-reading the ownership record
// after its announcement.
func SetBrokenNoRecheck(on bool) (restore func()) { return set(&brokenNoRecheck, on) }

// SetBrokenRecheckFirst makes a new owner re-read the ownership record
// before it announces instead of after.
func SetBrokenRecheckFirst(on bool) (restore func()) { return set(&brokenRecheckFirst, on) }

// SetBrokenListBeforeClaim makes a new owner tombstone the announced epochs
// of a LIST made before its claim.
func SetBrokenListBeforeClaim(on bool) (restore func()) { return set(&brokenListBeforeClaim, on) }

// SetBrokenReaderStaleList makes readers scan the announced epochs of a
// LIST made before their read began.
func SetBrokenReaderStaleList(on bool) (restore func()) { return set(&brokenReaderStaleList, on) }

// SetBrokenReaderStopsAtMissing makes readers end the chain at the first
// missing slot of an announced epoch above a seal.
func SetBrokenReaderStopsAtMissing(on bool) (restore func()) {
	return set(&brokenReaderStopsAtMissing, on)
}

// SetBrokenPointer makes readers follow the epoch named in a seal.
func SetBrokenPointer(on bool) (restore func()) { return set(&brokenPointer, on) }

// SetBrokenNoTombstones makes a new owner seal the newest epoch with data
// and tombstone nothing.
func SetBrokenNoTombstones(on bool) (restore func()) { return set(&brokenNoTombstones, on) }

// SetBrokenGCNewestFirst makes GC delete newest first (record files in
// descending txid order, then older snapshots), so a walk can meet a hole
// while the file it started from is still there (broken.go).
func SetBrokenGCNewestFirst(on bool) (restore func()) { return set(&brokenGCNewestFirst, on) }

// SetBrokenGCMarkers makes GC delete the seals and tombstones its
// snapshot covers (broken.go).
func SetBrokenGCMarkers(on bool) (restore func()) { return set(&brokenGCMarkers, on) }

// SetBrokenHandoffAck makes Close acknowledge the appends still queued
// without writing them (broken.go).
func SetBrokenHandoffAck(on bool) (restore func()) { return set(&brokenHandoffAck, on) }

// ForgetStaleLists drops the listings the stale-LIST variants keep.
func ForgetStaleLists() {
	staleMu.Lock()
	clear(staleLists)
	staleMu.Unlock()
}

// The rules' code, called only under their switches.

// staleLists holds, per cell, the announced epochs of the previous LIST a
// broken variant made, standing in for a LIST made earlier than it may be.
var (
	staleMu    sync.Mutex
	staleLists = map[string][]uint64{}
)

// staleAnnounced returns the announced epochs of the previous LIST of cell
// (made by any store of this process), restricted to epochs below limit, in
// place of fresh, and keeps fresh for the next call
// (brokenListBeforeClaim, brokenReaderStaleList). The first call gets
// fresh.
func staleAnnounced(cell string, limit uint64, fresh []uint64) []uint64 {
	staleMu.Lock()
	defer staleMu.Unlock()
	old, ok := staleLists[cell]
	if !ok {
		staleLists[cell] = slices.Clone(fresh)
		return fresh
	}
	var out []uint64
	for _, e := range old {
		if e < limit {
			out = append(out, e)
		}
	}
	staleLists[cell] = slices.Clone(fresh)
	return out
}

// trustTypedError is the write path of brokenNoReadBack: it takes err, the
// typed error of the PUT, at its word.
func (s *store) trustTypedError(ctx context.Context, key string, err error) (*File, error) {
	if !errors.Is(err, bucket.ErrPrecondition) {
		return nil, errcode.Errorf(errcode.CodeAmbiguous, "write %s: outcome unknown: %w", key, err)
	}
	f, _, rerr := s.read(ctx, key)
	switch {
	case rerr != nil:
		return nil, rerr
	case f == nil:
		return nil, errcode.Errorf(errcode.CodeAmbiguous, "write %s: 412, then missing: %w", key, err)
	}
	return f, nil
}

// ackEarly is the write path of brokenEarlyAck: it acknowledges every
// append of batch as if its file were written at txid, and returns
// stand-ins for them whose outcomes nobody waits for.
func ackEarly(batch []*pending, epoch uint64, txid TxID, pos Pos) []*pending {
	out := make([]*pending, len(batch))
	at := pos
	for i, p := range batch {
		p.done <- outcome{res: BatchResult{Epoch: epoch, TxID: txid, FirstPos: at, LastPos: at + Pos(len(p.recs)) - 1, TxPos: pos}}
		at += Pos(len(p.recs))
		out[i] = &pending{recs: p.recs, key: p.key, digest: p.digest, taken: true, done: make(chan outcome, 1)}
	}
	return out
}

// newestFirst reverses victims (older snapshots, then record files in txid
// order) into the delete order of brokenGCNewestFirst.
func newestFirst(victims []listed) {
	for l, r := 0, len(victims)-1; l < r; l, r = l+1, r-1 {
		victims[l], victims[r] = victims[r], victims[l]
	}
}

// handOverLocked takes the appends still queued — not yet taken by the
// writer — off the log, for brokenHandoffAck; l.mu must be held. They
// count as taken: an appender whose context ends meanwhile hears an
// unknown outcome, not a refusal.
func (l *Log) handOverLocked() []*pending {
	q := l.queueLocked()
	if l.w != nil {
		l.w.queue = nil
	}
	for _, p := range q {
		p.taken = true
	}
	return q
}

// ackHandedOver is brokenHandoffAck's answer to the appends handOverLocked
// took: acknowledged at the positions they would have taken in a file at
// txid, which nothing writes (the seal goes there).
func ackHandedOver(q []*pending, epoch uint64, txid TxID, pos Pos) {
	at := pos
	for _, p := range q {
		p.done <- outcome{res: BatchResult{Epoch: epoch, TxID: txid, FirstPos: at, LastPos: at + Pos(len(p.recs)) - 1, TxPos: pos}}
		at += Pos(len(p.recs))
	}
}
