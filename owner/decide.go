package owner

import (
	"math"
	"time"

	"github.com/deedkit/deed/errcode"
)

// Action is what a claim decided to do.
type Action int

const (
	// Create the record with If-None-Match: the cell has never been claimed.
	Create Action = iota + 1
	// Take the record over with If-Match and epoch+1.
	Take
	// Refuse: a live node holds the cell.
	Refuse
	// RefuseCorrupt: the record does not parse and the claim is not forced,
	// or the epoch to write would not fit (reason "epoch-overflow"): forced
	// or not, nothing is written, because a wrapped epoch would sort below
	// every fence it must be above.
	RefuseCorrupt
)

func (a Action) String() string {
	switch a {
	case Create:
		return "create"
	case Take:
		return "take"
	case Refuse:
		return "refuse"
	case RefuseCorrupt:
		return "refuse-corrupt"
	}
	return "unknown"
}

// Current is what a claimer read of own.json.
type Current struct {
	Exists  bool
	Corrupt bool // exists but does not parse
	Record  Record
	// DataEpoch is the newest epoch directory under the cell's ltx/ prefix;
	// read only for a forced claim of a corrupt record.
	DataEpoch uint64
}

// Decision is the outcome of Decide.
type Decision struct {
	Action Action
	// Epoch is the epoch to write (for Create and Take).
	Epoch uint64
	// Reason says why: "absent", "released", "re-entry", "owner-dead",
	// "forced", "owner-alive" or "corrupt". It feeds logs and metrics.
	Reason string
}

// ReasonEpochOverflow is the reason of a RefuseCorrupt decision when the
// record (or, for a forced claim over a corrupt one, the newest data
// epoch) is already at the largest epoch.
const ReasonEpochOverflow = "epoch-overflow"

// Decide is the claim rule (docs/design.md, "Claiming a cell") as a pure function of what was read
// (cur), who is asking (me), what is known of the owner's liveness (owner,
// judged at now) and whether an operator forces the claim.
func Decide(cur Current, me string, owner Observation, now time.Time, p Params, force bool) Decision {
	switch {
	case !cur.Exists:
		return Decision{Action: Create, Epoch: 1, Reason: "absent"}
	case cur.Corrupt && !force:
		return Decision{Action: RefuseCorrupt, Reason: "corrupt"}
	case cur.Corrupt && cur.DataEpoch == math.MaxUint64:
		return Decision{Action: RefuseCorrupt, Reason: ReasonEpochOverflow}
	case cur.Corrupt:
		// The record's epoch is unreadable. Start above the newest epoch
		// that holds data, so the new owner's seals fence every writer whose
		// data exists. (A lost owner that never wrote cannot be fenced by
		// an epoch nobody can read: that is why this needs force.)
		return Decision{Action: Take, Epoch: cur.DataEpoch + 1, Reason: "forced"}
	case cur.Record.Epoch == math.MaxUint64:
		return Decision{Action: RefuseCorrupt, Reason: ReasonEpochOverflow}
	}
	next := cur.Record.Epoch + 1
	switch {
	case cur.Record.Released():
		return Decision{Action: Take, Epoch: next, Reason: "released"}
	case cur.Record.Node == me:
		return Decision{Action: Take, Epoch: next, Reason: "re-entry"}
	case !Alive(owner, now, p) || IncarnationDead(owner, cur.Record.Inc, p):
		return Decision{Action: Take, Epoch: next, Reason: "owner-dead"}
	case force:
		return Decision{Action: Take, Epoch: next, Reason: "forced"}
	}
	return Decision{Action: Refuse, Reason: "owner-alive"}
}

// Hint is what a node remembers of a cell it does not hold, so that a claim
// can send its conditional write before reading own.json. A hint is only a
// guess: the write's condition is what makes the claim correct, and a
// refused guess is followed by the ordinary read and Decide.
type Hint struct {
	// Known is set when own.json exists: this node read or wrote it, so a
	// create-only PUT would only be refused.
	Known bool
	// ReleasedETag is own.json's ETag as this node's own release wrote it
	// (Released at epoch Epoch), "" when the node did not release the cell.
	ReleasedETag string
	Epoch        uint64
	// End is the chain end that release recorded (nil: none).
	End *End
	// Announces is that release's Record.Announces: an epoch the next
	// claim's record must carry (see Record.Announces).
	Announces uint64
	// own is set on this node's memory of its own release whose End is
	// a seal its log wrote and saw land (with the seal's timestamp ts):
	// never on a hint from a peer (NoteHint) nor on one handed out.
	own bool
	ts  int64
}

// Guess is the claim a node may try before it reads own.json, as a pure
// function of its hint; ok is false when it must read first.
//
//   - nothing known: create with If-None-Match at epoch 1 — the never-claimed
//     cell costs one request; a refusal (412) costs one more than reading
//     first would have. (A node whose unknown cells have mostly existed
//     marks them Known: it reads first.)
//   - released by this node: If-Match on the ETag that release produced,
//     epoch+1, exactly what Decide makes of a released record; every body
//     carries a fresh nonce, so that ETag matches only while nobody has
//     written since.
//   - known to exist otherwise, or forced: read first. A forced claim must
//     see the record (and, when it is corrupt, the newest data epoch) to
//     choose an epoch above every writer it fences.
func Guess(h Hint, force bool) (d Decision, etag string, ok bool) {
	switch {
	case force:
		return Decision{}, "", false
	case h.ReleasedETag != "" && h.Epoch < math.MaxUint64:
		return Decision{Action: Take, Epoch: h.Epoch + 1, Reason: "released"}, h.ReleasedETag, true
	case h.Known || h.ReleasedETag != "":
		return Decision{}, "", false
	}
	return Decision{Action: Create, Epoch: 1, Reason: "absent"}, "", true
}

// Params are the liveness timings shared by a deployment.
type Params struct {
	TTL    time.Duration
	Margin time.Duration
}

// Observation is what an observer knows of one node lease: whether it
// exists, its ETag, and when this process first saw that ETag on its own
// monotonic clock. The writer's at_ms is deliberately absent: liveness never
// compares two machines' clocks.
type Observation struct {
	Node      string
	Exists    bool
	Released  bool
	ETag      string
	FirstSeen time.Time // local clock, with its monotonic reading
	// Confirmed is the local send time of the newest read (LIST or GET)
	// that still showed this version: the store held it at some moment
	// after Confirmed.
	Confirmed time.Time
	Addr      string
	// Incarnation of the node process that wrote the lease.
	Incarnation string
	// TTL the node advertises in its lease (ttl_ms). It is a duration, not
	// a timestamp, so using it compares no clocks.
	TTL time.Duration
	// Corrupt is the DEED-E030 error when the lease exists but is not a
	// valid node lease (too large, not JSON, or with fields no node
	// writes); such a lease is judged by its ETag alone.
	Corrupt string
	// Weight (placement share, ≥ 1 when unset), Draining and Cells are
	// what the lease advertises; see NodeRecord. They never judge
	// liveness.
	Weight   float64
	Draining bool
	Cells    int
	// Verified says the lease's MAC is right under the observer's lease
	// key (Observer.VerifyWith): its node holds the fleet secret. Only a
	// verified node is a member; liveness never looks at it.
	Verified bool
	// size is the lease's length when it was last read whole (-1 when it
	// did not parse, 0 when never read): a later version a LIST shows of
	// the same size class (leaseGenMod) advertises the same fields.
	size int64
	// after is the send time of the last read that showed the version
	// before this one (zero when unknown): this version was written after
	// it. It only schedules reads (Observer.watchPlan), never judges.
	after time.Time
}

// Alive is client-go's rule: a node is dead when its lease is missing,
// released, or its ETag has been seen unchanged for longer than TTL+margin
// of the observer's own time. A node that fences itself at TTL−margin after
// its last successful send is therefore always fenced before any observer
// may call it dead.
//
// The wait is the longer of the observer's TTL and the TTL the node
// advertises: a node fences itself by its own TTL, so an observer configured
// with a shorter one (a CLI with defaults) must not call it dead sooner.
func Alive(o Observation, now time.Time, p Params) bool {
	if !o.Exists || o.Released {
		return false
	}
	return now.Sub(o.FirstSeen) <= max(p.TTL, o.TTL)+p.Margin
}

// IncarnationDead reports whether the observation proves that incarnation
// inc of the node has stopped acting for good, however old the observation
// is: its lease says released, or a read sent at Confirmed still showed a
// version first seen more than TTL+margin earlier. Every renewal that could
// have kept the writer alive had to succeed before its fence deadline, which
// falls before FirstSeen+TTL−margin, so that read would have shown it.
//
// Incarnations never come back: a restarted process, or a fenced daemon
// regaining its node id, writes its lease under a new one. A record naming
// inc can therefore be taken over on an old view, while a view that merely
// says "the node" is dead may predate its restart and must be read again.
func IncarnationDead(o Observation, inc string, p Params) bool {
	if inc == "" || !o.Exists || (o.Incarnation != inc && !brokenIncarnationBlind) {
		return false
	}
	return o.Released || provenDead(o, p)
}

// provenDead reports whether a read sent at o.Confirmed still showed a
// version first seen more than TTL+margin earlier.
func provenDead(o Observation, p Params) bool {
	return o.Exists && o.Confirmed.Sub(o.FirstSeen) > max(p.TTL, o.TTL)+p.Margin
}

// FenceDeadline is when a node that last renewed successfully with a request
// sent at lastSend must stop acting as owner.
func FenceDeadline(lastSend time.Time, p Params) time.Time {
	return lastSend.Add(p.TTL - p.Margin)
}

// RenewTimeout bounds one renewal attempt: half the time left before the
// fence, within [floor, TTL/3], so a hung request cannot use up the budget
// for retries but a slow store still gets a fair chance — and never beyond
// the deadline itself: a node with an attempt in flight is still acting,
// and must stop by its deadline, before any peer may call it dead.
func RenewTimeout(now, deadline time.Time, p Params) time.Duration {
	left := deadline.Sub(now) / 2
	floor := p.TTL / 50
	if floor < 50*time.Millisecond {
		floor = 50 * time.Millisecond
	}
	if left < floor {
		left = floor
	}
	if ceil := p.TTL / 3; left > ceil {
		left = ceil
	}
	return min(left, deadline.Sub(now))
}

// The range of a node lease's TTL, the one place it is decided. Below a
// second, a node renewing every TTL/3 and fencing itself at TTL−margin has
// a few hundred milliseconds for a renewal: one slow PUT at an object
// store's tail latency would fence it. Above an hour, a crashed node's cells
// stay blocked for over an hour, which no deployment wants; and since
// observers wait for the TTL a lease advertises, the upper bound is also
// the longest any lease (or garbage written in its place) can make a peer
// wait. Durations near 2^63 ns would overflow deadline arithmetic.
const (
	MinTTL = time.Second
	MaxTTL = time.Hour
)

// ValidateTTL refuses a TTL outside MinTTL..MaxTTL with DEED-E040. Every
// TTL deed takes (a Node's config, the CLI's --ttl flags, a peer's lease)
// goes through it.
func ValidateTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return errcode.Errorf(errcode.CodeBadRequest, "invalid ttl %v: must be %v..%v", ttl, MinTTL, MaxTTL)
	}
	return nil
}

// Validate checks the TTL's range (ValidateTTL) and margin < TTL/3.
func (p Params) Validate() error {
	if err := ValidateTTL(p.TTL); err != nil {
		return err
	}
	if p.Margin < 0 || p.Margin >= p.TTL/3 {
		return errcode.Errorf(errcode.CodeBadRequest, "invalid timings: need 0 <= margin (%v) < ttl/3 (%v)", p.Margin, p.TTL/3)
	}
	return nil
}
