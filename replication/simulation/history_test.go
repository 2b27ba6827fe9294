package simulation

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/replication"
)

// outcome of an append as its caller saw it.
type outcome int

const (
	acked   outcome = iota // returned a position: must be in every later read
	refused                // failed definitely: must never be read
	unknown                // DEED-E012: may or may not be in the log
)

func (o outcome) String() string { return [...]string{"ok", "refused", "unknown"}[o] }

func classify(err error) outcome {
	switch {
	case err == nil:
		return acked
	case errcode.CodeOf(err) == errcode.CodeAmbiguous:
		return unknown
	}
	return refused
}

// appendOp is one Append as recorded.
type appendOp struct {
	cell, data string
	inc        int // incarnation that appended
	epoch      uint64
	call, ret  int64 // history clock
	out        outcome
	res        replication.Result
	err        error
}

// readOp is one successful read: the records after position after, to the
// end of the chain. Reads ask for the whole log (after 0); one that finds
// those positions compacted reads from the newest snapshot on instead, as
// an application would, and is then the segment after the snapshot.
type readOp struct {
	cell      string
	inc       int
	barrier   bool
	src       string // "read", or "restore" for a snapshot's restore (never a barrier)
	after     replication.Pos
	until     replication.Pos // > 0: the read stops before this position (Log.Restore stops at the log's start)
	call, ret int64
	recs      []replication.Record
}

// snapOp is one snapshot: the records it covers (decoded from the state it
// wrote, so the checkers see what the snapshot says), the state itself, and
// what Log.Snapshot answered. It is recorded whatever the answer: a write
// with an unknown outcome may have landed.
type snapOp struct {
	cell    string
	inc     int
	key     string
	epoch   uint64
	upTo    replication.TxID
	recs    []replication.Record
	state   []byte
	nextPos replication.Pos // as Log.Snapshot returned it; 0 on error
	err     error
}

// gcOp is one GC run.
type gcOp struct {
	cell, by string
	deleted  int
	err      error
}

// leaseRec is one minted lease.
type leaseRec struct {
	cell      string
	epoch     uint64
	token     string
	node      string
	inc       *incarnation
	reason    string
	call, ret int64
}

// history is everything the checkers judge. Its clock is a counter, not
// virtual time: many events share one instant of virtual time, and the
// counter keeps their real order (an operation that returned before
// another was called has a smaller return stamp than the other's call).
type history struct {
	clock atomic.Int64

	mu         sync.Mutex
	appends    []*appendOp
	reads      []*readOp
	leases     []*leaseRec
	snaps      []*snapOp
	gcs        []*gcOp
	compacted  int            // reads that found their positions compacted and read from a snapshot
	gcRaces    atomic.Int64   // fencing walks that met a hole GC made and started again
	handoffs   map[string]int // retires by handoffs ("move", "move failed", …) and appends routed again after one
	violations []string       // found while running (the liveness invariant)
	trace      []string
	start      time.Time
}

func (h *history) now() int64 { return h.clock.Add(1) }

func (h *history) addAppend(a *appendOp) {
	h.mu.Lock()
	h.appends = append(h.appends, a)
	h.mu.Unlock()
}

func (h *history) addRead(r *readOp) {
	h.mu.Lock()
	h.reads = append(h.reads, r)
	h.mu.Unlock()
}

func (h *history) addSnap(s *snapOp) {
	h.mu.Lock()
	h.snaps = append(h.snaps, s)
	h.mu.Unlock()
}

func (h *history) addGC(g *gcOp) {
	h.mu.Lock()
	h.gcs = append(h.gcs, g)
	h.mu.Unlock()
}

// count adds one to the counter what of the handoffs.
func (h *history) count(what string) {
	h.mu.Lock()
	if h.handoffs == nil {
		h.handoffs = map[string]int{}
	}
	h.handoffs[what]++
	h.mu.Unlock()
}

func (h *history) addLease(l *leaseRec) {
	h.mu.Lock()
	h.leases = append(h.leases, l)
	h.mu.Unlock()
}

// lease returns the lease minted for (cell, epoch), if any.
func (h *history) lease(cell string, epoch uint64) *leaseRec {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.leases {
		if l.cell == cell && l.epoch == epoch {
			return l
		}
	}
	return nil
}

func (h *history) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	h.mu.Lock()
	h.violations = append(h.violations, msg)
	h.mu.Unlock()
	h.logf("VIOLATION %s", msg)
}

// logf adds a line to the trace printed when a seed fails (or with -v and
// -seed): virtual time since the start, then the event.
func (h *history) logf(format string, args ...any) {
	line := fmt.Sprintf("%9.3fs %s", time.Since(h.start).Seconds(), fmt.Sprintf(format, args...))
	h.mu.Lock()
	h.trace = append(h.trace, line)
	h.mu.Unlock()
}

func (h *history) traceText() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.trace, "\n")
}

func shortErr(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}
