//go:build !deedbroken

package replication

import "context"

// Deliberately broken rules. Each one drops a piece of the data path that
// the promises rest on (docs/guarantees.md). They exist only so that the
// simulation (replication/simulation) and the step-by-step races in this
// package's tests can prove their checkers catch them: a checker that stays
// green against a broken protocol is a broken checker.
//
// In every build without the deedbroken tag each switch is a false
// constant, so every `if brokenX {…}` on the data path is dead code the
// compiler drops, and the functions below, which only such blocks call,
// are never reached. A test build with the deedbroken tag gets the same
// names as variables, its setters and the rules' real code
// (broken_deedbroken.go).

const (
	// brokenNoSeal: a new owner starts its chain where its predecessors'
	// ends, without sealing or tombstoning them.
	brokenNoSeal = false
	// brokenNoReadBack: a slot write whose PUT failed is never read back.
	// A 412 is trusted to mean that someone else's file holds the slot
	// (the file there is read only to report it), and any other failure is
	// reported as an unknown outcome (DEED-E012) at once, without retrying.
	// On its own that is merely unhelpful; behind a client that retries
	// conditional writes by itself, the 412 can answer our own first
	// attempt, and an append that landed is refused.
	brokenNoReadBack = false
	// brokenEarlyAck: appends are acknowledged when their PUT is sent,
	// before it returns.
	brokenEarlyAck = false

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
	brokenNoRecheck            = false
	brokenRecheckFirst         = false
	brokenListBeforeClaim      = false
	brokenReaderStaleList      = false
	brokenReaderStopsAtMissing = false

	// brokenPointer: readers follow the epoch named in a seal instead of
	// scanning the announced epochs above it (the model's --pointer).
	// Random schedules almost never produce the three owners racing in the
	// one order it needs; TestBrokenPointerRuleLosesRecords stages it.
	brokenPointer = false
	// brokenNoTombstones: a new owner seals the newest epoch with data and
	// tombstones nothing (the model's --no-tombstones).
	brokenNoTombstones = false

	// The broken GC rules. The simulation catches brokenGCMarkers
	// (TestBrokenGCDeletesMarkers); the race brokenGCNewestFirst opens
	// needs an interleaving random schedules almost never produce, so
	// TestBrokenGCNewestFirstSealsAHole sets it up step by step.
	//
	// brokenGCNewestFirst: GC deletes what it may delete newest first — the
	// record files in descending txid order, then the older snapshots, newest
	// first — instead of older snapshots first, then record files in txid
	// order. Every file it deletes is still covered by the newest snapshot, so
	// the end state is the same; what breaks is the argument that lets walks
	// run during GC (stillValid): a walk that meets a hole must find the file
	// it started from (a record below the hole, or an older snapshot) gone as
	// well. Deleting from the top, GC makes holes above a walk's start while
	// the start is still there: a new owner's fencing walk that started below
	// the range takes the hole for the end of the chain and seals it — a seal
	// in the middle of the chain, which cuts off every record after it — and
	// a restore from an older snapshot, or a read whose listing predates the
	// snapshot (reads check holes against the snapshot their listing showed,
	// anchor.covered), returns the log cut short.
	brokenGCNewestFirst = false
	// brokenGCMarkers: GC deletes the seals and tombstones at or below the
	// snapshot along with the records. Restores do not miss them (they start
	// after the snapshot), but a paused or forced-out owner does: the seal at
	// its next slot was all that fenced it, so its next append lands in the
	// freed slot and is acknowledged — below the snapshot, where no restore
	// will ever look.
	brokenGCMarkers = false

	// brokenHandoffAck: a handoff that hands the appends still queued over
	// instead of writing them. Close takes them off the queue and
	// acknowledges them at the positions they would have taken at the
	// chain end, then seals that end: acknowledged records no restore will
	// ever read. (The handoff's order — seal, then release — is not a
	// broken rule: the next owner seals the chain itself, so releasing
	// first loses nothing; the simulation runs it with -releasefirst.)
	brokenHandoffAck = false

	// The broken rules of idempotent and conditional appends:
	// brokenForgetKeys, a new owner that does not learn the keys its
	// predecessors wrote (a retry after a change of owner is written
	// again); brokenReplayPos, a replay that answers the first position of
	// the transaction file the key's records are in, not theirs (wrong when
	// a group commit carried several appends); brokenStaleMatch, a
	// conditional append judged against the chain's end when it is queued,
	// not where the writer puts it (appends queued ahead of it move it).
	brokenForgetKeys = false
	brokenReplayPos  = false
	brokenStaleMatch = false
	// brokenMismatchUnproved, a conditional append refused at once, where
	// it is judged: neither after the commit taken before it nor, past the
	// log's end, after the read barrier (a fenced owner then answers a
	// retry of a record a newer owner wrote as not written, naming an end
	// that is stale or that records never written make up).
	brokenMismatchUnproved = false

	// brokenNoImplicitEpoch1: epoch 1 still writes without announcing,
	// but listings count it announced only by its marker or files, so a
	// successor's walk does not tombstone its first slot.
	brokenNoImplicitEpoch1 = false

	// brokenTrustEnd: the next epoch starts at the chain end a release
	// recorded in own.json without checking the seal there.
	brokenTrustEnd = false
	// brokenWalkIgnoresUnmarked: the fencing walk does not count the
	// epoch the replaced ownership record announced (Record.Announces;
	// the model's cold-walk-ignores-annc).
	brokenWalkIgnoresUnmarked = false

	// The broken rules of trimming: brokenGCPastTrim, a trim's deletion
	// that ignores its bound (GCOptions.Below) and deletes every file the
	// snapshot covers, records at or above the trim point among them;
	// brokenTrimBlind, a trim point written without the condition on the
	// version read, so that a lost write landing late (an old holder's,
	// after a takeover) moves the point back.
	brokenGCPastTrim = false
	brokenTrimBlind  = false
)

// brokenOnly is the panic of the functions below in a release build, where
// nothing calls them: each is called only under a switch that is false
// here. broken_deedbroken.go has their real code.
const brokenOnly = "replication: a deliberately broken rule ran in a build without the deedbroken tag"

func staleAnnounced(string, uint64, []uint64) []uint64 { panic(brokenOnly) }

func (s *store) trustTypedError(context.Context, string, error) (*File, error) { panic(brokenOnly) }

func ackEarly([]*pending, uint64, TxID, Pos) []*pending { panic(brokenOnly) }

func newestFirst([]listed) { panic(brokenOnly) }

func (l *Log) handOverLocked() []*pending { panic(brokenOnly) }

func ackHandedOver([]*pending, uint64, TxID, Pos) { panic(brokenOnly) }
