package simulation

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/deedkit/deed/fakes3"
)

// simConfig is the shape of one run, drawn from its seed.
type simConfig struct {
	nodes, cells int
	ttl          time.Duration
	steps        int
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
	nKinds
)

var kindNames = [...]string{"append", "read", "barrier-read", "claim", "forced-claim", "release", "stop",
	"latency", "errors", "partition", "pause", "crash", "clock", "straggle"}

func (k kind) String() string { return kindNames[k] }

// weights of the kinds in a schedule.
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
	lat   time.Duration // fLatency: the latency added
	reply bool          // fLatency: added to the reply (after the request applied), not before
	skew  time.Duration // fClock
}

func (s step) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "+%-6v %-12s n%d", s.gap, s.kind, s.node)
	switch s.kind {
	case opAppend:
		fmt.Fprintf(&b, " c%d x%d within %v", s.cell, s.burst, s.dur)
	case opRead, opBarrier, opClaim, opForce, opRelease:
		fmt.Fprintf(&b, " c%d", s.cell)
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
	}
	return b.String()
}

// plan draws the configuration and the whole schedule from the seed before
// anything runs: the schedule is a pure function of the seed.
func plan(seed uint64) (simConfig, []step) {
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
	return cfg, steps
}
