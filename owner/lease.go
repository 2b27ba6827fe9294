package owner

import (
	"context"
	"sync"

	"github.com/deedkit/deed/errcode"
)

// Lease is the capability to act as a cell's owner for one epoch.
//
// Only a successful claim constructs one (its fields are unexported, and the
// zero value is refused with DEED-E023), data-path calls borrow it, and
// Release consumes it. Once it has ended for any reason, Done is closed and
// Err says why; it never becomes valid again. A Lease does not make writes
// safe by itself — the epoch-fenced layout does — but it lets a holder learn
// early that it should stop.
type Lease struct {
	cell  string
	epoch uint64
	nonce string
	etag  string // own.json's ETag as written by the claim
	// rel is the node that claimed the lease (and whose name it records):
	// it writes the release and forgets the lease when it ends.
	rel *Node

	once sync.Once
	mu   sync.Mutex
	// done is made by the first Done call, not by the claim: a node holding
	// many idle leases that nobody waits on keeps no channel for each.
	done chan struct{}
	err  error
	// after is what AfterEnd registered, started when the lease ends: one
	// func (several are chained), not a slice, as a daemon registers one
	// per lease and holds many.
	after func()
	// releasing counts this node's releases of the lease under way: the
	// node's record watch ignores what it reads meanwhile.
	releasing int32
	// minted is set by the claim that made the lease; a zero Lease is
	// invalid.
	minted bool
	// created is set when the claim created own.json (If-None-Match):
	// no epoch of the cell came before this one.
	created bool
	// announcesSelf is set when the claim record announces the lease's
	// own epoch (Record.Announces). (The Announces of the record the
	// claim replaced, rarely set, is kept by the node: Node.unmarked.)
	announcesSelf bool
	// ended is set once the lease has ended and its node forgot it: from
	// then on Done is closed.
	ended bool
}

// Cell is the cell this lease owns.
func (l *Lease) Cell() string { return l.cell }

// Epoch is the claim's epoch; the cell's data for it lives under ltx/e<epoch>/.
func (l *Lease) Epoch() uint64 { return l.epoch }

// Node is the node id that holds the lease.
func (l *Lease) Node() string {
	if l == nil || l.rel == nil {
		return ""
	}
	return l.rel.cfg.Name
}

// Created reports whether the claim that made the lease created the cell's
// ownership record (a create-only PUT that succeeded): the lease is epoch 1
// and no claim of the cell came before it, so its log has no predecessor
// to fence (see replication.Open).
func (l *Lease) Created() bool { return l != nil && l.minted && l.created }

// AnnouncedByClaim reports whether the lease's claim record announces its
// own epoch (Record.Announces): the claim took its predecessor's released
// end, so every successor's walk counts the epoch announced and its log
// needs neither a marker nor a re-check (see replication.Open).
func (l *Lease) AnnouncedByClaim() bool {
	return l != nil && l.minted && l.announcesSelf
}

// announcesLocked is the claim record's Announces, which a release that
// names no end carries on; l.rel.mu must be held.
func (l *Lease) announcesLocked() uint64 {
	if l.announcesSelf {
		return l.epoch
	}
	return l.rel.unmarked[l]
}

// Unmarked is the epoch the record the lease's claim replaced announced
// (Record.Announces; 0: none): one that may write without an announcement
// marker, which the log's fencing walk counts announced.
func (l *Lease) Unmarked() uint64 {
	if l == nil || !l.minted || l.rel == nil {
		return 0
	}
	n := l.rel
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.unmarked[l]
}

// NoteEnd records that the lease's log sealed its chain end at slot txid
// (the seal's position pos, its timestamp ts), for the lease's release to
// write into own.json: the next epoch then reads that seal instead of
// listing and walking the log (see Record.End), or, when it is this
// node's next claim on that very release, trusts it unread (PrevEnd.Own).
// Only a seal whose write is known to have landed may be noted.
func (l *Lease) NoteEnd(txid, pos uint64, ts int64) {
	if l == nil || !l.minted || l.rel == nil {
		return
	}
	n := l.rel
	n.mu.Lock()
	if n.held[l.cell] == l {
		if n.sealedAt == nil {
			n.sealedAt = map[*Lease]sealedEnd{}
		}
		n.sealedAt[l] = sealedEnd{End: End{TxID: txid, Pos: pos}, ts: ts}
	}
	n.mu.Unlock()
}

// TakePrevEnd returns, once, the predecessor's chain end the lease's claim
// learned: the claim replaced (If-Match) a release by epoch Epoch−1 that
// recorded its sealed end. ok is false otherwise, and on every later call.
// It is a hint: the log reads the seal it names before trusting it.
func (l *Lease) TakePrevEnd() (p PrevEnd, ok bool) {
	if l == nil || !l.minted || l.rel == nil {
		return PrevEnd{}, false
	}
	n := l.rel
	n.mu.Lock()
	p, ok = n.prevEnds[l]
	delete(n.prevEnds, l)
	n.mu.Unlock()
	return p, ok
}

// Token is the claim's nonce: unique per claim, so it identifies the writer
// incarnation (two claims of one epoch are impossible, but a restarted node
// re-entering its cell gets a new token and a new epoch).
func (l *Lease) Token() string { return l.nonce }

// Done is closed when the lease ends: released, superseded or node fenced.
func (l *Lease) Done() <-chan struct{} {
	if l == nil || !l.minted {
		return closedChan
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return closedChan
	}
	if l.done == nil {
		l.done = make(chan struct{})
	}
	return l.done
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Err is nil while the lease is valid. After it ends it is a *errcode.Error
// with DEED-E022 (released), DEED-E021 (superseded) or DEED-E025 (node
// fenced). A zero or nil lease reports DEED-E023.
func (l *Lease) Err() error {
	if l == nil || !l.minted {
		return errInvalidLease
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

var errInvalidLease = errcode.Errorf(errcode.CodeInvalidLease, "invalid lease: not minted by a claim")

// Check returns the error a data-path call must fail with when it is handed
// this lease: nil only for a live lease minted by a claim.
func (l *Lease) Check() error { return l.Err() }

// Supersede ends the lease because a newer epoch fenced it (the data path
// found a seal or tombstone at its own slot). cause is kept for diagnosis.
func (l *Lease) Supersede(cause error) {
	l.end(errcode.Errorf(errcode.CodeSuperseded, "lease lost: cell %s epoch %d superseded: %w", l.cell, l.epoch, cause))
}

// end records the first reason the lease ended and closes Done.
func (l *Lease) end(err error) {
	if l == nil || !l.minted {
		return
	}
	l.once.Do(func() {
		l.mu.Lock()
		l.err = err
		after := l.after
		l.after = nil
		l.mu.Unlock()
		// The node forgets the lease before Done closes, so whoever wakes
		// on Done never finds it still listed as held.
		if l.rel != nil {
			l.rel.forget(l)
		}
		l.mu.Lock()
		l.ended = true
		done := l.done
		l.mu.Unlock()
		if done != nil {
			close(done)
		}
		if after != nil {
			go after()
		}
	})
}

// AfterEnd arranges for f to run in its own goroutine once the lease has
// ended, for whatever reason (at once if it already has), like
// context.AfterFunc. A holder of many leases learns of each end this way
// without keeping a goroutine per lease blocked on Done.
func (l *Lease) AfterEnd(f func()) {
	if l != nil && l.minted {
		l.mu.Lock()
		if l.err == nil {
			if prev := l.after; prev != nil {
				l.after = func() { go prev(); f() }
			} else {
				l.after = f
			}
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
	}
	go f()
}

// isReleasing reports whether a release of l is under way.
func (l *Lease) isReleasing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.releasing > 0
}

// markReleasing marks a release under way until the returned func is called.
func (l *Lease) markReleasing() func() {
	l.mu.Lock()
	l.releasing++
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		l.releasing--
		l.mu.Unlock()
	}
}

// Release writes the released record (If-Match on the claim's ETag) and ends
// the lease. If the record changed meanwhile, the lease ends as superseded
// and Release returns DEED-E021. Releasing twice returns DEED-E022.
//
// A log opened on the lease must be closed (sealed) first; the daemon and
// With do this in that order.
func (l *Lease) Release(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return err
	}
	return l.rel.releaseLease(ctx, l)
}
