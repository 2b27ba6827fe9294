package simulation

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/deedkit/deed/fakes3"
)

// simConfig is the shape of one run, drawn from its seed.
type simConfig struct {
	nodes, cells int
	ttl          time.Duration
	steps        int // of the main stream
	// finalGC runs GC on every cell once the run is over, before the final
	// restore (drawn by planCompaction).
	finalGC bool
}

// kind is what a step does.
type kind int

const (
	// Client operations.
	opAppend  kind = iota // a burst of concurrent appends by the cell's log on a node
	opRead                // read without barrier (the log's, or a plain replication.Read)
	opBarrier             // read with barrier, by the node's log of the cell
	opClaim               // claim the cell and open its log
	opForce               // forced claim (an operator's takeover) and open
	opRelease             // close (seal) the log and release the lease
	opStop                // stop the node cleanly and start it again
	// Faults.
	fLatency   // added latency on every request of a node, for a while
	fErrors    // a share of a node's requests fail: before/after apply, 409, 503, hang
	fPartition // the node reaches nothing, for a while
	fPause     // the node's I/O freezes, often past its TTL, then resumes
	fCrash     // the process dies without releasing; restarted with the same node id
	fClock     // the node's wall clock jumps by hours (or back to true)
	fStraggle  // a share of the node's conditional PUTs land late
	// Compaction, drawn from a stream of its own (see planCompaction).
	opSnapshot // the cell's owner snapshots its log at a durable txid
	opGC       // GC of the cell, by a node or by an out-of-band operator
	// Lock-only claims, drawn from a stream of their own (see planLocks).
	opLock // a lock-only claim (deed exec): claim, hold, release; never touches the log
	// Handoffs, drawn from a stream of their own (see planHandoffs): each
	// retires a held cell as the daemon does — seal, then release.
	opMove  // the holder retires the cell and the preferred other live node claims it
	opDrain // the node retires every cell it holds, which the others claim, and claims none for a while
	opIdle  // the holder retires the cell if unused for a while; its next append claims it again
	// Trims, drawn from a stream of their own (see planTrims).
	opTrim // raise the cell's trim point from several nodes at once, then delete below it
	nKinds
)

var kindNames = [...]string{"append", "read", "barrier-read", "claim", "forced-claim", "release", "stop",
	"latency", "errors", "partition", "pause", "crash", "clock", "straggle", "snapshot", "gc", "lock-only",
	"move", "drain", "idle-release", "trim"}

func (k kind) String() string { return kindNames[k] }

// weights of the kinds in the main schedule. Snapshots and GC weigh
// nothing here: they come from planCompaction's own stream, so adding them
// left every draw of the main stream — and every older seed's schedule of
// the other kinds — as it was.
var weights = [nKinds]int{
	opAppend: 40, opRead: 7, opBarrier: 10, opClaim: 10, opForce: 2, opRelease: 4, opStop: 1,
	fLatency: 3, fErrors: 6, fPartition: 2, fPause: 2, fCrash: 1, fClock: 2, fStraggle: 3,
}

// step is one entry of the schedule: after gap, do kind to node (and cell).
type step struct {
	gap   time.Duration
	kind  kind
	node  int
	cell  int
	burst int           // appends
	dur   time.Duration // window of a fault, latency, pause length
	fault fakes3.Fault  // fErrors
	pct   int           // share of requests hit, in percent
	op    fakes3.Op     // fErrors, fLatency: "" = every kind
	lat   time.Duration // fLatency: the latency added; opGC: the latency of its every request
	reply bool          // fLatency: added to the reply (after the request applied), not before
	skew  time.Duration // fClock
	// opSnapshot: where between the log's start and its head, in permille;
	// atStart snapshots exactly the state the log started from, rebuilt
	// with Log.Restore.
	frac    int
	atStart bool
	// opGC: operator is an out-of-band GC on a client of its own, whose
	// every request takes lat, and whose first DELETE waits stall first (a
	// GC that listed, then stalled, and deletes from an old listing).
	operator bool
	stall    time.Duration
}

func (s step) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "+%-6v %-12s n%d", s.gap, s.kind, s.node)
	switch s.kind {
	case opAppend:
		fmt.Fprintf(&b, " c%d x%d within %v", s.cell, s.burst, s.dur)
	case opRead, opBarrier, opClaim, opForce, opRelease:
		fmt.Fprintf(&b, " c%d", s.cell)
	case opLock:
		fmt.Fprintf(&b, " c%d x%d (force %v) hold %v", s.cell, s.burst, s.operator, s.dur)
	case opMove:
		fmt.Fprintf(&b, " c%d", s.cell)
		if s.burst > 0 {
			fmt.Fprintf(&b, " under 1+%d appends, the first one's PUT taking %v", s.burst, s.lat)
		}
	case opDrain:
		fmt.Fprintf(&b, " for %v", s.dur)
	case opIdle:
		fmt.Fprintf(&b, " c%d if unused for %v", s.cell, s.dur)
	case fLatency:
		where := "before"
		if s.reply {
			where = "after"
		}
		fmt.Fprintf(&b, " %v %s %q for %v", s.lat, where, s.op, s.dur)
	case fErrors:
		fmt.Fprintf(&b, " %d%% %s on %q for %v", s.pct, s.fault, s.op, s.dur)
	case fPartition, fPause:
		fmt.Fprintf(&b, " for %v", s.dur)
	case fStraggle:
		fmt.Fprintf(&b, " %d%% for %v", s.pct, s.dur)
	case fCrash:
		fmt.Fprintf(&b, " restart after %v", s.dur)
	case fClock:
		fmt.Fprintf(&b, " skew %v", s.skew)
	case opSnapshot:
		if s.atStart {
			fmt.Fprintf(&b, " c%d at the log's start", s.cell)
		} else {
			fmt.Fprintf(&b, " c%d at %d‰ of the log", s.cell, s.frac)
		}
	case opGC:
		if s.operator {
			fmt.Fprintf(&b, " c%d by the operator, %v per request, stalls %v", s.cell, s.lat, s.stall)
		} else {
			fmt.Fprintf(&b, " c%d, %v per request", s.cell, s.lat)
		}
	}
	return b.String()
}

// plan draws the configuration and the whole schedule from the seed before
// anything runs: the schedule is a pure function of the seed (and of
// handoffs, which leaves the handoffs out: the schedules from before they
// joined, which the regression seeds replay).
func plan(seed uint64, handoffs bool) (simConfig, []step) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	cfg := simConfig{
		nodes: 3 + rng.IntN(3),
		cells: 1 + rng.IntN(4),
		ttl:   3 * time.Second,
		steps: 50 + rng.IntN(50),
	}
	total := 0
	for _, w := range weights {
		total += w
	}
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	ttlms := int(cfg.ttl / time.Millisecond)
	steps := make([]step, cfg.steps)
	for i := range steps {
		s := step{node: rng.IntN(cfg.nodes), cell: rng.IntN(cfg.cells)}
		switch r := rng.IntN(10); {
		case r < 6:
			s.gap = ms(0, 150)
		case r < 9:
			s.gap = ms(150, 800)
		default:
			s.gap = ms(800, 2*ttlms)
		}
		x := rng.IntN(total)
		for k, w := range weights {
			if x < w {
				s.kind = kind(k)
				break
			}
			x -= w
		}
		ops := []fakes3.Op{"", "", fakes3.OpPut, fakes3.OpGet, fakes3.OpHead, fakes3.OpList}
		switch s.kind {
		case opAppend:
			s.burst = 1 + rng.IntN(3)
			s.dur = []time.Duration{200 * time.Millisecond, time.Second, 2 * cfg.ttl}[rng.IntN(3)] // the appends' deadline
		case fLatency:
			s.dur = ms(200, 2*ttlms)
			s.op = ops[rng.IntN(len(ops))]
			s.lat = ms(10, 300)
			if rng.IntN(3) == 0 {
				s.lat = ms(300, ttlms/2)
			}
			s.reply = rng.IntN(2) == 0
		case fErrors:
			s.dur = ms(100, ttlms)
			s.fault = []fakes3.Fault{fakes3.ErrBefore, fakes3.ErrAfter, fakes3.ErrAfter, fakes3.Conflict, fakes3.SlowDown, fakes3.Drop}[rng.IntN(6)]
			s.pct = 10 + rng.IntN(50)
			s.op = ops[rng.IntN(len(ops))]
		case fPartition:
			s.dur = ms(200, 2*ttlms)
		case fPause:
			s.dur = ms(ttlms/3, 2*ttlms)
		case fCrash:
			s.dur = ms(0, ttlms)
		case fClock:
			s.skew = []time.Duration{-6 * time.Hour, -time.Hour, 0, time.Hour, 3 * time.Hour}[rng.IntN(5)]
		case fStraggle:
			s.dur = ms(200, ttlms)
			s.pct = 10 + rng.IntN(40)
		}
		steps[i] = s
	}
	extra, finalGC := planCompaction(seed, cfg, steps)
	cfg.finalGC = finalGC
	extra = append(extra, planLocks(seed, cfg, steps)...)
	extra = append(extra, planTrims(seed, cfg, steps)...)
	if handoffs {
		extra = append(extra, planHandoffs(seed, cfg, steps)...)
	}
	return cfg, merge(steps, extra)
}

// handoffSeed keys planHandoffs' stream.
const handoffSeed = 0x4a4d0ff

// planHandoffs draws the handoffs — moves, drains and idle releases — from
// a stream of their own, so that adding them left every draw of the other
// streams as it was (the merged schedule, and so the interleavings, still
// changed). Over the time the main steps span: a move about every 4 s, an
// idle release about every 6 s, a drain about every 20 s, so that a run
// holds a few of each among its hundred-odd steps. Half the moves come
// with appends in flight: one whose PUT is slow, then more queued behind
// it, when the retire begins — the retire must write them all before it
// seals (the broken handoff of TestBrokenHandoffAcksUnwritten does not).
func planHandoffs(seed uint64, cfg simConfig, main []step) []at {
	rng := rand.New(rand.NewPCG(seed^handoffSeed, 0x4a))
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	var end time.Duration
	for _, s := range main {
		end += s.gap
	}
	var out []at
	for _, k := range []struct {
		kind kind
		mean int // ms between two steps of the kind, on average
	}{{opMove, 4000}, {opIdle, 6000}, {opDrain, 20000}} {
		for t := ms(0, k.mean); t <= end; t += ms(0, 2*k.mean) {
			s := step{kind: k.kind, node: rng.IntN(cfg.nodes), cell: rng.IntN(cfg.cells)}
			switch k.kind {
			case opMove:
				if rng.IntN(2) == 0 {
					s.burst = 1 + rng.IntN(3)
					s.lat = ms(20, 300)
				}
			case opIdle:
				s.dur = ms(100, 3000) // unused for that long: released
			case opDrain:
				s.dur = ms(500, 2*int(cfg.ttl/time.Millisecond)) // claims nothing for that long
			}
			out = append(out, at{t: t, s: s})
		}
	}
	return out
}

// lockSeed keys planLocks' stream.
const lockSeed = 0x10c0

// planLocks draws lock-only claims — a deed exec: claim the cell under an
// identity of its own, hold it, release it, never touching the log — from
// a stream of their own, so that adding them left every older seed's
// other steps as they were. About one burst every 1.5 s, each claiming
// the cell 1 to 40 times in a row (a burst of execs bumps the epoch that
// many times), forced in a third of the bursts (an operator taking the
// cell from a live owner); and after
// half the main stream's claims, a forced burst within 300 ms on the same
// cell (followed, mostly, by another node's claim and appends), so that
// lock-only claims and a newer data owner fall between a data owner's
// claim and its first steps on the log. Data
// owners thus meet gaps of many epochs between the newest epoch with data
// and their own, and lose their cell while they open their log.
func planLocks(seed uint64, cfg simConfig, main []step) []at {
	rng := rand.New(rand.NewPCG(seed^lockSeed, 0x10c))
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	burst := func(cell int, force bool) step {
		s := step{kind: opLock, node: rng.IntN(cfg.nodes), cell: cell}
		s.burst = 1 + rng.IntN(40)
		s.operator = force || rng.IntN(3) == 0
		s.dur = ms(0, 300)
		return s
	}
	var end time.Duration
	var out []at
	for _, s := range main {
		end += s.gap
		if (s.kind == opClaim || s.kind == opForce) && rng.IntN(2) == 0 {
			t := end + ms(0, 300)
			b := burst(s.cell, true)
			out = append(out, at{t: t, s: b})
			if rng.IntN(3) != 0 {
				// Another node claims the cell once the execs are done,
				// and appends come in.
				t += b.dur + ms(0, 200)
				c := step{kind: opClaim, node: (s.node + 1 + rng.IntN(cfg.nodes-1)) % cfg.nodes, cell: s.cell}
				a := step{kind: opAppend, node: rng.IntN(cfg.nodes), cell: s.cell, burst: 1 + rng.IntN(3), dur: time.Second}
				out = append(out, at{t: t, s: c}, at{t: t + ms(0, 500), s: a})
			}
		}
	}
	for t := ms(0, 1500); t <= end; t += ms(0, 3000) {
		out = append(out, at{t: t, s: burst(rng.IntN(cfg.cells), false)})
	}
	return out
}

// compactionSeed derives the seed of planCompaction's stream. Drawing the
// snapshots and GC runs from a stream of their own keeps every draw of the
// main stream, and so every older seed's schedule of the other kinds,
// unchanged.
const compactionSeed = 0xc0ffee5eed

// at is a step at an absolute time of the run (gap unused).
type at struct {
	t time.Duration
	s step
}

// planCompaction draws the snapshots and GC runs of a schedule, over the
// time the main steps span. Snapshots come about every 1.5 s, GC runs
// about every 2.5 s, so GC mostly finds a newer snapshot and files to
// delete. Every GC request takes 10–200 ms (a GC pays a round trip per
// file), so that deletions overlap claims, fencing walks, reads and
// appends; a third of the runs are an out-of-band operator's, and half of
// those stall between their LIST and their first DELETE.
func planCompaction(seed uint64, cfg simConfig, main []step) (extra []at, finalGC bool) {
	rng := rand.New(rand.NewPCG(seed^compactionSeed, 0x9c))
	finalGC = rng.IntN(2) == 0
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	var end time.Duration
	for _, s := range main {
		end += s.gap
	}
	for _, k := range []struct {
		kind kind
		mean int // ms between two steps of the kind, on average
	}{{opSnapshot, 1500}, {opGC, 2500}} {
		for t := ms(0, k.mean); t <= end; t += ms(0, 2*k.mean) {
			s := step{kind: k.kind, node: rng.IntN(cfg.nodes), cell: rng.IntN(cfg.cells)}
			switch k.kind {
			case opSnapshot:
				s.frac = rng.IntN(1001)
				if rng.IntN(4) == 0 {
					s.frac = 1000 // at the head: the most common choice of an application
				}
				s.atStart = rng.IntN(5) == 0
			case opGC:
				s.lat = ms(10, 200)
				if rng.IntN(3) == 0 {
					s.operator = true
					if rng.IntN(2) == 0 {
						s.stall = ms(100, 3*int(cfg.ttl/time.Millisecond))
					}
				}
			}
			extra = append(extra, at{t: t, s: s})
		}
	}
	return extra, finalGC
}

// merge places extra steps among the main ones by time: every main step
// keeps its absolute time (its gap is split around the extra steps that
// fall inside it), and an extra step at the same time as a main one comes
// after it.
func merge(main []step, extra []at) []step {
	slices.SortStableFunc(extra, func(a, b at) int { return cmp.Compare(a.t, b.t) })
	out := make([]step, 0, len(main)+len(extra))
	var now, t time.Duration // now: time of the last step placed; t: of the next main step
	j := 0
	for _, s := range main {
		t += s.gap
		for ; j < len(extra) && extra[j].t < t; j++ {
			e := extra[j].s
			e.gap = extra[j].t - now
			now = extra[j].t
			out = append(out, e)
		}
		s.gap = t - now
		now = t
		out = append(out, s)
	}
	for ; j < len(extra); j++ {
		e := extra[j].s
		e.gap = extra[j].t - now
		now = extra[j].t
		out = append(out, e)
	}
	return out
}
