package replication

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
)

// Deliberately broken rules. Each one drops a piece of the data path that
// DESIGN.md says the promises rest on. They exist only so that the
// simulation (replication/simulation) can prove its checkers catch them: a
// checker that stays green against a broken protocol is a broken checker.
// Only a test build with the deedbroken tag can set them
// (broken_deedbroken.go); in every other build they are false, and each
// costs one load of a false bool where it is checked.
var (
	// brokenNoSeal: a new owner starts its chain where its predecessors'
	// ends, without sealing or tombstoning them.
	brokenNoSeal bool
	// brokenNoReadBack: a slot write whose PUT failed is never read back.
	// A 412 is trusted to mean that someone else's file holds the slot
	// (the file there is read only to report it), and any other failure is
	// reported as an unknown outcome (DEED-E012) at once, without retrying.
	// On its own that is merely unhelpful; behind a client that retries
	// conditional writes by itself, the 412 can answer our own first
	// attempt, and an append that landed is refused.
	brokenNoReadBack bool
	// brokenEarlyAck: appends are acknowledged when their PUT is sent,
	// before it returns.
	brokenEarlyAck bool

	// The broken variants of bounded fencing (each one a counterexample of
	// the model): a new owner that does not re-read the ownership record
	// after announcing (brokenNoRecheck) or re-reads it before announcing
	// (brokenRecheckFirst), so an owner whose marker comes after a newer
	// owner's LIST still writes; a writer that tombstones the announced
	// epochs of a LIST from before its claim (brokenListBeforeClaim); a
	// reader that scans the announced epochs of a LIST made before its
	// read began (brokenReaderStaleList) or ends the chain at the first
	// missing slot of an announced epoch above a seal
	// (brokenReaderStopsAtMissing).
	brokenNoRecheck            bool
	brokenRecheckFirst         bool
	brokenListBeforeClaim      bool
	brokenReaderStaleList      bool
	brokenReaderStopsAtMissing bool
)

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
	for i, p := range batch {
		p.done <- outcome{res: Result{Epoch: epoch, TxID: txid, Pos: pos + Pos(i), FirstPos: pos, Count: len(batch)}}
		out[i] = &pending{data: p.data, taken: true, done: make(chan outcome, 1)}
	}
	return out
}
