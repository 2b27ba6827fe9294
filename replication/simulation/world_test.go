package simulation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// world is one run: the shared bucket, the nodes, the schedule and the
// history. It lives inside a synctest bubble.
type world struct {
	seed    uint64
	cfg     simConfig
	steps   []step
	mem     *fakes3.Mem
	trims   trimMax // the highest trim point seen per cell (trim_test.go)
	h       *history
	nodes   []*simNode
	cells   []string
	retries int // conditional-write retries by the client (a broken variant)
	// releaseFirst reverses a handoff's order: release the record, then
	// seal (see handoff_test.go).
	releaseFirst bool

	reqTimeout time.Duration // the S3 client's per-request timeout
	opTimeout  time.Duration // a client operation's deadline

	ops    sync.WaitGroup // client operations, fault windows, restarts
	bg     sync.WaitGroup // stragglers still travelling
	ending atomic.Bool
	ids    atomic.Int64

	mu      sync.Mutex
	incs    []*incarnation
	crashed map[string]bool // clients partitioned forever
	rules   int
	final   map[string][]replication.Record // each cell's log at the end: the newest snapshot's records, then the rest
	finalE  map[string]error
	files   map[string][]*replication.File // each cell's .ltx files at the end
	// finalSnap is the snapshot the final restore started from, if any.
	finalSnap map[string]*replication.Snapshot
	markers   markerWatch
	// free holds the cells a handoff retired and nobody claimed since: the
	// next append to one is routed to its preferred node, which claims it.
	free map[string]bool
}

// simNode is a node id; its process may be restarted (new incarnation).
type simNode struct {
	w    *world
	idx  int
	name string
	skew atomic.Int64 // wall-clock offset, ns

	mu            sync.Mutex
	cur           *incarnation // nil while (re)starting
	gen           int
	restarting    bool
	paused        time.Time
	stragglePct   int
	straggleUntil time.Time
	replyOp       fakes3.Op // "" = every kind
	replyDelay    time.Duration
	replyUntil    time.Time
	drainUntil    time.Time // while draining the node claims nothing
}

// slowReply is how long the reply to a request of kind op, just served,
// takes to come back.
func (n *simNode) slowReply(op fakes3.Op) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	if (n.replyOp == "" || n.replyOp == op) && time.Now().Before(n.replyUntil) {
		return n.replyDelay
	}
	return 0
}

// incarnation is one process run of a node id, with its own client.
type incarnation struct {
	id     int
	n      *simNode
	client string
	b      *client
	node   *owner.Node

	mu      sync.Mutex
	logs    map[string]*cellLog
	busy    map[string]bool   // a claim or release of the cell is in flight
	reasons map[string]string // the last claim's reason, per cell (from the hook)
	crashed bool
}

type cellLog struct {
	lease *owner.Lease
	log   *replication.Log
	// lastUsed is when (virtual UnixNano) an append or read last went
	// through this log: the idle release judges by it.
	lastUsed atomic.Int64
	// retiring is made when a handoff's retire of the log begins and
	// closed when it ends; retired says it sealed and released (under
	// incarnation.mu). See handoff_test.go.
	retiring chan struct{}
	retired  bool
}

func newWorld(seed uint64, retries int, handoffs bool) *world {
	cfg, steps := plan(seed, handoffs)
	w := &world{
		seed:         seed,
		cfg:          cfg,
		steps:        steps,
		mem:          fakes3.NewMem(),
		h:            &history{start: time.Now()},
		retries:      retries,
		releaseFirst: *releaseFirstFlag,
		reqTimeout:   2 * time.Second,
		opTimeout:    2 * cfg.ttl,
		crashed:      map[string]bool{},
		final:        map[string][]replication.Record{},
		finalE:       map[string]error{},
		files:        map[string][]*replication.File{},
		finalSnap:    map[string]*replication.Snapshot{},
		free:         map[string]bool{},
	}
	for i := range cfg.nodes {
		w.nodes = append(w.nodes, &simNode{w: w, idx: i, name: fmt.Sprintf("n%d", i)})
	}
	for i := range cfg.cells {
		w.cells = append(w.cells, fmt.Sprintf("c%d", i))
	}
	return w
}

func (w *world) logOpts() []replication.Option {
	return []replication.Option{replication.WithRequestTimeout(w.reqTimeout), replication.WithBackoff(20*time.Millisecond, time.Second),
		replication.WithLogger(slog.New(protoLog{w.h})), replication.WithIdempotencyWindow(simKeyWindow, 0)}
}

// run plays the schedule, then winds everything down and reads the final
// state. It must run inside a synctest bubble.
func (w *world) run() {
	w.h.start = time.Now()
	w.watchMarkers()
	for _, n := range w.nodes {
		inc := w.newIncarnation(n)
		if err := inc.node.Open(context.Background()); err != nil {
			panic(fmt.Sprintf("open %s: %v", n.name, err)) // a fresh bucket without faults
		}
		n.cur = inc
	}
	for i, s := range w.steps {
		time.Sleep(s.gap)
		w.h.logf("step %d: %v", i, s)
		w.do(i, s)
	}
	w.finish()
}

func (w *world) newIncarnation(n *simNode) *incarnation {
	n.mu.Lock()
	gen := n.gen
	n.gen++
	n.mu.Unlock()
	name := fmt.Sprintf("%s.%d", n.name, gen)
	inc := &incarnation{id: int(w.ids.Add(1)), n: n, client: name,
		logs: map[string]*cellLog{}, busy: map[string]bool{}, reasons: map[string]string{}}
	inc.b = &client{b: w.mem.Client(name), late: w.mem.Client(name + "~late"), n: n, name: name,
		timeout: w.reqTimeout, retries: w.retries, count: map[string]int{}}
	node, err := owner.NewNode(inc.b, owner.Config{
		Name: n.name, Addr: name, TTL: w.cfg.ttl,
		// As in the daemon (daemon.Open): an owner that writes learns of a
		// takeover at its next write, so it needs no record watch, and the
		// watch's reads would only reshuffle every seed's schedule.
		WatchInterval: -1,
		WallClock:     func() time.Time { return time.Now().Add(time.Duration(n.skew.Load())) },
		Hooks: owner.Hooks{Claim: inc.onClaim, Fence: inc.onFence,
			Renew: func(result string) { w.h.logf("%s renew: %s", name, result) }},
	})
	if err != nil {
		panic(err)
	}
	inc.node = node
	w.mu.Lock()
	w.incs = append(w.incs, inc)
	w.mu.Unlock()
	return inc
}

func (n *simNode) pausedUntil() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.paused
}

func (n *simNode) straggling() (int, time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stragglePct, n.straggleUntil
}

// current is the node's running incarnation, nil while it (re)starts. A
// fenced incarnation is restarted, as a supervisor would.
func (n *simNode) current() *incarnation {
	n.mu.Lock()
	inc := n.cur
	n.mu.Unlock()
	if inc == nil {
		return nil
	}
	if inc.node.Err() != nil {
		n.restart(inc, false, 0)
		return nil
	}
	return inc
}

// restart replaces inc by a new incarnation of the same node id. A crash
// abandons inc without closing anything (its client is cut off for good,
// and its goroutines go on until they notice); otherwise inc is closed
// first: its logs sealed, its cells released, its node lease released.
func (n *simNode) restart(inc *incarnation, crash bool, after time.Duration) {
	w := n.w
	n.mu.Lock()
	if n.restarting || n.cur != inc || w.ending.Load() {
		n.mu.Unlock()
		return
	}
	n.restarting = true
	n.cur = nil
	n.mu.Unlock()
	if crash {
		inc.mu.Lock()
		inc.crashed = true
		inc.mu.Unlock()
		w.mu.Lock()
		w.crashed[inc.client] = true
		w.mu.Unlock()
		w.mem.Partition(inc.client, true)
		w.h.logf("%s crashed", inc.client)
	}
	w.ops.Go(func() {
		if !crash {
			ctx, cancel := context.WithTimeout(context.Background(), w.opTimeout)
			err := inc.close(ctx)
			cancel()
			w.h.logf("%s stopped: %v", inc.client, shortErr(err))
		}
		time.Sleep(after)
		next := w.newIncarnation(n)
		for !w.ending.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*w.cfg.ttl)
			err := next.node.Open(ctx)
			cancel()
			if err == nil {
				w.h.logf("%s opened", next.client)
				n.mu.Lock()
				n.cur, n.restarting = next, false
				n.mu.Unlock()
				return
			}
			w.h.logf("%s open: %v", next.client, shortErr(err))
			time.Sleep(w.cfg.ttl / 3)
		}
		n.mu.Lock()
		n.restarting = false
		n.mu.Unlock()
	})
}

// close seals every log of inc and closes its node (which releases its
// cells and its node lease).
func (inc *incarnation) close(ctx context.Context) error {
	inc.mu.Lock()
	logs := inc.logs
	inc.logs = map[string]*cellLog{}
	inc.mu.Unlock()
	var errs []error
	for _, cl := range logs {
		if err := cl.log.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := inc.node.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (inc *incarnation) log(cell string) *cellLog {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	return inc.logs[cell]
}

// begin marks a claim or release of cell in flight; false if one already is.
func (inc *incarnation) begin(cell string) bool {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	if inc.busy[cell] {
		return false
	}
	inc.busy[cell] = true
	return true
}

func (inc *incarnation) end(cell string) {
	inc.mu.Lock()
	delete(inc.busy, cell)
	inc.mu.Unlock()
}

func (inc *incarnation) onFence(reason string) {
	inc.n.w.h.logf("%s fenced (%s)", inc.client, reason)
}

// onClaim is owner.Hooks.Claim. It checks the liveness-safety invariant at
// the moment a takeover of a dead owner's cell has applied: the node that
// held the previous epoch must have fenced itself (or stopped) already —
// docs/design.md, "Node liveness": a node has always fenced itself before any
// observer may call it dead.
func (inc *incarnation) onClaim(cell, result, reason string) {
	inc.mu.Lock()
	inc.reasons[cell] = reason
	inc.mu.Unlock()
	if result != "ok" || reason != "owner-dead" {
		return
	}
	w := inc.n.w
	body, ok := w.mem.Bytes(owner.CellKey(cell))
	if !ok {
		return
	}
	rec, err := owner.ParseRecord(owner.CellKey(cell), body)
	if err != nil || rec.Node != inc.n.name || rec.Epoch < 2 {
		return // overwritten meanwhile: cannot tell which claim this was
	}
	prev := w.h.lease(cell, rec.Epoch-1)
	if prev == nil || prev.node == inc.n.name {
		return // the previous epoch's claim never minted a lease: nobody held it
	}
	select {
	case <-prev.inc.node.Done():
	default:
		w.h.violate("liveness: %s took %s over at epoch %d as owner-dead while %s, holder of epoch %d, had not fenced itself",
			inc.client, cell, rec.Epoch, prev.inc.client, prev.epoch)
	}
}

// goOp runs a client operation with its deadline.
func (w *world) goOp(f func(ctx context.Context)) {
	w.ops.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), w.opTimeout)
		defer cancel()
		f(ctx)
	})
}

// window runs undo after d, as part of the run.
func (w *world) window(d time.Duration, undo func()) {
	w.ops.Go(func() {
		time.Sleep(d)
		undo()
	})
}

func (w *world) do(i int, s step) {
	n := w.nodes[s.node]
	cell := w.cells[s.cell]
	switch s.kind {
	case opAppend:
		for k := range s.burst {
			w.ops.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), s.dur)
				defer cancel()
				id := fmt.Sprintf("s%d.%d", i, k)
				if int(draw(w.seed, "keyed", id)%100) < *keyedFlag {
					w.keyedAppend(ctx, n, cell, id, s.dur)
					return
				}
				w.append(ctx, n, cell, id)
			})
		}
	case opRead, opBarrier:
		w.goOp(func(ctx context.Context) { w.read(ctx, n, cell, s.kind == opBarrier) })
	case opClaim, opForce:
		w.goOp(func(ctx context.Context) { w.claim(ctx, n, cell, s.kind == opForce) })
	case opRelease:
		w.goOp(func(ctx context.Context) { w.release(ctx, n, cell) })
	case opLock:
		w.goOp(func(ctx context.Context) { w.lockOnly(ctx, i, cell, s) })
	case opSnapshot:
		w.goOp(func(ctx context.Context) { w.snapshot(ctx, n, cell, s) })
	case opTrim:
		w.goOp(func(ctx context.Context) { w.trim(ctx, n, cell, s) })
	case opMove:
		w.goOp(func(ctx context.Context) { w.move(ctx, i, n, cell, s) })
	case opDrain:
		w.goOp(func(ctx context.Context) { w.drain(ctx, n, s) })
	case opIdle:
		w.goOp(func(ctx context.Context) { w.idle(ctx, n, cell, s) })
	case opGC:
		// A stalled operator's GC gets its stall on top of the deadline.
		w.ops.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), w.opTimeout+s.stall)
			defer cancel()
			w.gc(ctx, n, cell, s)
		})
	case opStop:
		if inc := n.current(); inc != nil {
			n.restart(inc, false, 0)
		}
	case fCrash:
		n.mu.Lock()
		inc := n.cur
		n.mu.Unlock()
		if inc != nil {
			n.restart(inc, true, s.dur)
		}
	case fPause:
		n.mu.Lock()
		n.paused = time.Now().Add(s.dur)
		n.mu.Unlock()
	case fClock:
		n.skew.Store(int64(s.skew))
	case fStraggle:
		n.mu.Lock()
		n.stragglePct, n.straggleUntil = s.pct, time.Now().Add(s.dur)
		n.mu.Unlock()
	case fPartition:
		inc := n.current()
		if inc == nil {
			return
		}
		w.mem.Partition(inc.client, true)
		w.window(s.dur, func() {
			w.mu.Lock()
			crashed := w.crashed[inc.client]
			w.mu.Unlock()
			if !crashed {
				w.mem.Partition(inc.client, false)
			}
		})
	case fLatency, fErrors:
		inc := n.current()
		if inc == nil {
			return
		}
		r := fakes3.Rule{Client: inc.client, Op: s.op}
		if s.kind == fLatency && s.reply {
			n.mu.Lock()
			n.replyOp, n.replyDelay, n.replyUntil = s.op, s.lat, time.Now().Add(s.dur)
			n.mu.Unlock()
			return
		}
		if s.kind == fLatency {
			r.Latency = s.lat
		} else {
			w.mu.Lock()
			w.rules++
			id := w.rules
			w.mu.Unlock()
			count := map[string]int{} // Match calls are serialised by the Mem
			r.Fault = s.fault
			r.Match = func(op fakes3.Op, key string) bool {
				count[string(op)+key]++
				return int(draw(w.seed, "fault", id, string(op), key, count[string(op)+key])%100) < s.pct
			}
		}
		remove := w.mem.Inject(r)
		w.window(s.dur, remove)
	}
}

// holder picks the incarnation that serves a client's request for cell:
// one of the running incarnations with a log open on it (usually one, but
// a stale owner that has not learnt it was fenced counts too), chosen by
// the step's node index; n itself when none has.
func (w *world) holder(n *simNode, cell string) (*incarnation, *cellLog) {
	var cands []*incarnation
	for _, m := range w.nodes {
		if inc := m.current(); inc != nil && inc.log(cell) != nil {
			cands = append(cands, inc)
		}
	}
	if len(cands) == 0 {
		inc := n.current()
		return inc, nil
	}
	inc := cands[n.idx%len(cands)]
	return inc, inc.log(cell)
}

// append appends a record named after its step (unique in the run) and
// the incarnation that wrote it.
//
// As in the daemon, an append that meets a handoff's retire of its cell
// (it waited while the retire ran, or met the closing log: nothing was
// written) is routed again — to the new holder, or to the preferred node,
// which claims the cell — and is one operation in the history, answered
// by its last try.
func (w *world) append(ctx context.Context, n *simNode, cell, id string) {
	var a *appendOp
	var res replication.Result
	var err error
	for try := 0; try < maxRoutes; try++ {
		inc, cl := w.route(ctx, n, cell)
		if cl == nil {
			break
		}
		if a == nil {
			a = &appendOp{cell: cell, data: inc.client + ":" + id, call: w.h.now()}
		}
		a.inc, a.epoch = inc.id, cl.lease.Epoch()
		cl.lastUsed.Store(time.Now().UnixNano())
		res, err = cl.log.Append(ctx, cl.lease, []byte(a.data))
		if !inc.retiredUnder(ctx, cl, err) {
			break
		}
		w.h.logf("append %s %s e%d met a handoff (%s): routed again", cell, a.data, a.epoch, shortErr(err))
		w.h.count("append routed again")
	}
	if a == nil {
		return
	}
	data := a.data
	a.ret, a.out, a.res, a.err = w.h.now(), classify(err), res, err
	w.h.addAppend(a)
	if err != nil {
		w.h.logf("append %s %s e%d: %s %s", cell, data, a.epoch, a.out, shortErr(err))
	} else {
		w.h.logf("append %s %s e%d: ok pos %d tx %d", cell, data, a.epoch, res.Pos, res.TxID)
	}
}

func (w *world) read(ctx context.Context, n *simNode, cell string, barrier bool) {
	inc, cl := w.holder(n, cell)
	if inc == nil || cl == nil && barrier {
		return
	}
	if cl != nil {
		cl.lastUsed.Store(time.Now().UnixNano())
	}
	r := &readOp{cell: cell, inc: inc.id, barrier: barrier, src: "read", call: w.h.now()}
	read := func(after replication.Pos) ([]replication.Record, error) {
		if cl != nil {
			return cl.log.Read(ctx, after, 0, barrier)
		}
		return replication.Read(ctx, inc.b, cell, after, 0, w.logOpts()...)
	}
	recs, err := read(0)
	// Positions from 1 on compacted into a snapshot: an application
	// restores from the newest snapshot and reads the records after it, so
	// the read becomes the segment after the snapshot. A newer snapshot and
	// GC may come between the two, hence the loop.
	for try := 0; try < 3 && errors.Is(err, replication.ErrCompacted); try++ {
		var snap *replication.Snapshot
		if snap, err = replication.LatestSnapshot(ctx, inc.b, cell, w.logOpts()...); err != nil {
			break
		}
		if snap == nil {
			w.h.violate("%s: a read by %s was told its positions are compacted, and the cell has no snapshot", cell, inc.client)
			return
		}
		r.after = snap.NextPos - 1
		recs, err = read(r.after)
	}
	r.ret = w.h.now()
	if err != nil {
		w.readFailed(cell, inc, fmt.Sprintf("read (barrier %v)", barrier), err)
		return
	}
	r.recs = recs
	w.h.addRead(r)
	if r.after > 0 {
		w.h.mu.Lock()
		w.h.compacted++
		w.h.mu.Unlock()
	}
	w.h.logf("read %s by %s (barrier %v): %d records after %d", cell, inc.client, barrier, len(r.recs), r.after)
}

func (w *world) claim(ctx context.Context, n *simNode, cell string, force bool) {
	inc := n.current()
	if inc == nil || n.draining() || !inc.begin(cell) {
		return
	}
	defer inc.end(cell)
	call := w.h.now()
	lease, err := inc.node.Claim(ctx, cell, owner.ClaimOptions{Force: force})
	ret := w.h.now()
	if err != nil {
		w.h.logf("claim %s by %s (force %v): %s", cell, inc.client, force, shortErr(err))
		return
	}
	inc.mu.Lock()
	reason := inc.reasons[cell]
	inc.mu.Unlock()
	w.h.addLease(&leaseRec{cell: cell, epoch: lease.Epoch(), token: lease.Token(), node: n.name, inc: inc, reason: reason, call: call, ret: ret})
	w.h.logf("claim %s by %s (force %v): epoch %d (%s)", cell, inc.client, force, lease.Epoch(), reason)
	// Half the claimers are slow on their way to the log: a sixth pause
	// before they open it (a scheduler, a GC pause), a sixth send an
	// announcement that takes its time to land, a sixth get a slow answer
	// to their first LIST of the log. Newer claims, lock-only ones and data
	// owners, come between a claim and its announcement, or between a
	// re-check and the LIST after it.
	d := draw(w.seed, "open-delay", cell, int(lease.Epoch()))
	slow := time.Duration(d/6%2000) * time.Millisecond
	switch d % 6 {
	case 0:
		w.h.logf("open log %s e%d by %s: after %v", cell, lease.Epoch(), inc.client, slow)
		time.Sleep(slow)
	case 1:
		w.h.logf("open log %s e%d by %s: its announcement takes %v", cell, lease.Epoch(), inc.client, slow)
		w.mem.Inject(fakes3.Rule{Client: inc.client, Op: fakes3.OpPut, Key: replication.AnnounceKey(cell, lease.Epoch()), Latency: slow, Times: 1})
	case 2:
		w.h.logf("open log %s e%d by %s: its LIST takes %v", cell, lease.Epoch(), inc.client, slow)
		w.mem.Inject(fakes3.Rule{Client: inc.client, Op: fakes3.OpList, KeyPrefix: replication.LogPrefix(cell), Latency: slow, Times: 1})
	}
	lg, err := replication.Open(ctx, inc.b, lease, w.logOpts()...)
	if err != nil {
		w.h.logf("open log %s e%d by %s: %s", cell, lease.Epoch(), inc.client, shortErr(err))
		if lease.Err() == nil {
			err := lease.Release(ctx)
			w.h.logf("release %s e%d by %s: %v", cell, lease.Epoch(), inc.client, shortErr(err))
		}
		return
	}
	w.h.logf("log %s e%d by %s starts at tx %d pos %d", cell, lease.Epoch(), inc.client, lg.Start().Next, lg.Start().NextPos)
	cl := &cellLog{lease: lease, log: lg}
	cl.lastUsed.Store(time.Now().UnixNano())
	inc.mu.Lock()
	old := inc.logs[cell]
	inc.logs[cell] = cl
	inc.mu.Unlock()
	w.mu.Lock()
	delete(w.free, cell)
	w.mu.Unlock()
	if old != nil { // re-entry superseded it
		_ = old.log.Close(ctx)
	}
}

// lockOnly is a burst of lock-only claims (deed exec): each under an
// identity of its own (never a data owner's node), held for s.dur and
// released, without a log. Each bumps the epoch and writes nothing under
// the log prefix; a forced one also takes the cell from a live owner,
// whose log goes on writing until the next data owner fences it.
func (w *world) lockOnly(ctx context.Context, i int, cell string, s step) {
	b := w.mem.Client(fmt.Sprintf("lock%d", i))
	for k := range s.burst {
		node, err := owner.NewNode(b, owner.Config{Name: fmt.Sprintf("lock%d-%d", i, k), TTL: w.cfg.ttl})
		if err != nil {
			w.h.violate("lock-only node: %v", err)
			return
		}
		lease, err := node.Claim(ctx, cell, owner.ClaimOptions{Force: s.operator})
		if err != nil {
			w.h.logf("lock-only claim %s by lock%d-%d: %s", cell, i, k, shortErr(err))
			return
		}
		if k == 0 || k == s.burst-1 {
			w.h.logf("lock-only claim %s by lock%d-%d: epoch %d", cell, i, k, lease.Epoch())
		}
		if k == s.burst-1 {
			time.Sleep(s.dur)
		}
		if err := lease.Release(ctx); err != nil {
			w.h.logf("lock-only release %s e%d: %s", cell, lease.Epoch(), shortErr(err))
			return
		}
	}
}

func (w *world) release(ctx context.Context, n *simNode, cell string) {
	inc := n.current()
	if inc == nil || !inc.begin(cell) {
		return
	}
	defer inc.end(cell)
	cl := inc.log(cell)
	if cl == nil {
		return
	}
	cerr := cl.log.Close(ctx)
	rerr := cl.lease.Release(ctx)
	inc.mu.Lock()
	if inc.logs[cell] == cl {
		delete(inc.logs, cell)
	}
	inc.mu.Unlock()
	w.h.logf("release %s e%d by %s: close %v, release %v", cell, cl.lease.Epoch(), inc.client, shortErr(cerr), shortErr(rerr))
}

// finish lets every operation end, stops every incarnation (crashed ones
// stay cut off), waits for stragglers, and reads the final state with a
// client no fault touches.
func (w *world) finish() {
	w.ops.Wait()
	w.ending.Store(true)
	w.ops.Wait() // restarts that were opening
	for _, n := range w.nodes {
		n.mu.Lock()
		n.paused = time.Time{}
		n.stragglePct = 0
		n.replyUntil = time.Time{}
		n.mu.Unlock()
	}
	w.mu.Lock()
	incs := append([]*incarnation(nil), w.incs...)
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, inc := range incs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 4*w.cfg.ttl)
			defer cancel()
			err := inc.close(ctx)
			w.h.logf("%s closed at the end: %v", inc.client, shortErr(err))
		})
	}
	wg.Wait()
	w.bg.Wait()
	ctx := context.Background()
	for _, cell := range w.cells {
		if w.cfg.finalGC {
			// Every chain is sealed now: GC deletes everything the newest
			// snapshot covers, and the restore below starts from it.
			rep, err := replication.GC(ctx, w.mem, cell, replication.GCOptions{DropKeyWindow: true}) // no retries follow
			w.h.addGC(&gcOp{cell: cell, by: "final", deleted: len(rep.Deleted), err: err})
			w.h.logf("final gc %s: %d deleted %v", cell, len(rep.Deleted), shortErr(err))
		}
		var recs []replication.Record
		var snap *replication.Snapshot
		_, err := replication.Restore(ctx, w.mem, cell, func(s replication.Snapshot) error {
			snap = &s
			return nil
		}, func(r replication.Record) error {
			recs = append(recs, r)
			return nil
		})
		if err == nil && snap != nil {
			// The whole log: the records the snapshot covers, then the rest.
			var covered []replication.Record
			if covered, err = decodeState(snap.State); err != nil {
				err = fmt.Errorf("snapshot %s: %w", snap.Key, err)
			}
			recs = append(covered, recs...)
			w.finalSnap[cell] = snap
		}
		w.final[cell], w.finalE[cell] = recs, err
		for _, key := range w.mem.Keys(replication.LogPrefix(cell)) {
			if !strings.HasSuffix(key, ".ltx") {
				continue
			}
			body, _ := w.mem.Bytes(key)
			f, err := replication.Decode(key, body)
			if err != nil {
				w.h.violate("damaged file %s: %v", key, err)
				continue
			}
			w.files[cell] = append(w.files[cell], f)
		}
	}
}
