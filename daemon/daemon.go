package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/internal/wait"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// Config says which node a Daemon is and how it serves.
type Config struct {
	// Node is the node id (a valid name), unique among the nodes sharing
	// the bucket.
	Node string
	// Advertise is the address peers and clients should use for this node,
	// stored in its node lease.
	Advertise string
	// TTL is the node lease's TTL (owner.ValidateTTL's range).
	TTL time.Duration
	// FenceExit makes a fenced node stop (Fenced delivers the fence error)
	// instead of dropping its cells and trying to win its node lease back.
	FenceExit bool
	// API bounds and guards the HTTP API that Handler serves.
	API APIConfig
	// Version is the build's version, reported by the deed_build_info
	// series.
	Version string
	// FleetSecret authenticates requests between the daemons of one fleet
	// (forwarded requests, handoffs). Empty turns the fleet off: the node
	// serves only what it holds or claims, as a single daemon does.
	FleetSecret string
	// Weight is this node's placement share (0 means 1), advertised in its
	// node lease.
	Weight float64
	// PeerClient sends the requests forwarded to peers (nil: NewPeerClient(nil),
	// which trusts the system's roots); give one that trusts the fleet's CA
	// when the peers serve HTTPS under a private one.
	PeerClient *http.Client
	// IdleRelease retires a held cell that has had no request for this
	// long (sealed and released; its next request claims it again); 0
	// keeps cells until they are released or the node drains. See idle.go.
	IdleRelease time.Duration
	// MaxCells bounds the cells held here: above it the least recently
	// used are retired, in the background; 0 means no bound.
	MaxCells int
	// KeyWindow and KeyLimit are the idempotency window of every cell's
	// log (replication.WithIdempotencyWindow): keyed appends are
	// recognised for KeyWindow (default 10 min) and up to KeyLimit keys
	// (default 100,000) per cell. Every node of a fleet must use the same.
	KeyWindow time.Duration
	KeyLimit  int
	// MoveRate bounds the cells the rebalancer hands off per second (0
	// means DefaultMoveRate; negative turns rebalancing off, drains still
	// run at DefaultMoveRate).
	MoveRate float64
	// TrimDeleteRate bounds the deletes per second of the background
	// deletion below trim points (0 means DefaultTrimDeleteRate).
	TrimDeleteRate float64
	// Retention, when set, trims on every cell held here the records
	// older than it (by their timestamp); 0 keeps them. See retention.go.
	Retention time.Duration
}

// Daemon is the long-running node: a node lease, the cells it holds with
// their open logs, and the HTTP API in front of them. Open makes one; its
// Handler serves the API; Close drains it.
type Daemon struct {
	cfg Config
	b   bucket.Bucket
	log *slog.Logger
	m   *metrics
	// peers checks peer proofs (nil key without a fleet secret).
	peers *peerVerifier
	// peersRead is when the status page last had every peer's lease read
	// (Unix ns; freshenPeers).
	peersRead atomic.Int64
	// logOpts opens every cell's log: built once, so the logs share it.
	logOpts replication.Option

	mu     sync.Mutex
	node   *owner.Node // nil while fenced and not yet re-opened
	cells  map[string]*cell
	closed bool
	// fencedObs is, while fenced, the fenced incarnation's observer, kept
	// fresh (refreshFenced) so that the node routes what it cannot serve
	// to its live peers instead of refusing it; nil otherwise.
	fencedObs *owner.Observer

	events eventRing // recent takeovers, fences, moves: the status page's
	ho     handoffs  // moves, pins and the drain (handoff.go)

	hints  holderHints  // which peer served a cell lately, for routing
	unable unableCounts // requests forwarded because this node could not serve them
	// waiting counts the reads with ?wait= under way (APIConfig.MaxWaitingReads).
	waiting atomic.Int64
	// followers counts the event streams under way (APIConfig.MaxFollowers).
	followers atomic.Int64
	// streamsCtx ends every event stream when cancelled (EndStreams,
	// Close): a stream has no end of its own, so that a shutdown waiting
	// for handlers would wait for it in vain.
	streamsCtx context.Context
	endStreams context.CancelFunc
	// sseHeartbeat is the streams' heartbeat (0: sseHeartbeat), shortened
	// by tests.
	sseHeartbeat time.Duration

	fenced chan error // receives the fence error when FenceExit is set
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// bg is the context of the daemon's background work, ended by Close
	// (nil before Open has started it).
	bg context.Context
	// hintPushes counts the release-hint pushes in flight (releasehint.go).
	hintPushes atomic.Int32

	idle *idleSweeper // nil when neither IdleRelease nor MaxCells is set

	ret retention // what the retention sweep knows of held cells (retention.go)
	tr  trims     // trim points seen and the background deletion below them (trim.go)
}

// cell is one cell held here: its lease and the log opened on it. mu
// serialises claiming and opening, so two requests for a free cell claim
// it once.
type cell struct {
	name string
	// lastUsed is the time (UnixNano) of the cell's last request here, read
	// without c.mu by the idle sweep and the status page.
	lastUsed atomic.Int64
	// inflight counts the requests using the cell's log now (begin/end):
	// a cell with one in flight is not idle, however long it runs.
	inflight atomic.Int32
	mu       sync.Mutex
	lease    *owner.Lease
	log      *replication.Log
	// releasing is set by a release that has begun; one that failed leaves
	// it set, so appends are refused until a retried release completes
	// (the log may already be closed).
	releasing bool
	// retired is the last lease that retire released here: requests that
	// were using it retry (see holding.retiredUnder).
	retired *owner.Lease
}

// holding is a cell's lease and log as they were at one moment, copied
// under the cell's lock: request handlers go on using them after the lock
// is gone, while the lease may end and the cell's fields be cleared.
type holding struct {
	name  string
	lease *owner.Lease
	log   *replication.Log
	c     *cell
}

// holding copies c's lease and log; c.mu must be held.
func (c *cell) holding() *holding { return &holding{name: c.name, lease: c.lease, log: c.log, c: c} }

// retiredUnder reports whether err is a log closed (or lease released) under a request by a
// retire of this very lease (a release, a move, an idle release) that has
// since completed: nothing of the request was written, and the request is
// to be routed again (the cell is free, or someone else's now), not
// refused.
func (h *holding) retiredUnder(err error) bool {
	// The append may have met the closing log, or the lease the retire
	// released after it: either refuses before writing anything.
	if !errors.Is(err, replication.ErrClosed) && errcode.CodeOf(err) != errcode.CodeReleased {
		return false
	}
	// A lease released here was retired (retire is the only release but
	// the node's close, whose retry meets the closing node): the identity
	// check alone misses a lease retired, claimed anew and retired again
	// (a cell moved away and back) before this request looked.
	if errcode.CodeOf(h.lease.Err()) == errcode.CodeReleased {
		return true
	}
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	return h.c.retired == h.lease
}

// Open opens the node lease on b and starts watching for a fence; zero
// API limits take their defaults (DefaultMaxBody, DefaultMaxLimit). It
// does not probe the store: a caller that has not checked b against the
// conditional-write contract runs probe.Run (package bucket/probe) first,
// as `deed run` does. The caller serves Handler and calls Close on shutdown.
func Open(ctx context.Context, cfg Config, b bucket.Bucket, log *slog.Logger) (*Daemon, error) {
	if cfg.IdleRelease < 0 || cfg.MaxCells < 0 {
		return nil, errcode.Errorf(errcode.CodeBadRequest, "idle release %v and max cells %d must not be negative", cfg.IdleRelease, cfg.MaxCells)
	}
	if cfg.KeyWindow < 0 || cfg.KeyLimit < 0 {
		return nil, errcode.Errorf(errcode.CodeBadRequest, "idempotency window %v and keys %d must not be negative", cfg.KeyWindow, cfg.KeyLimit)
	}
	if cfg.API.MaxBody == 0 {
		cfg.API.MaxBody = DefaultMaxBody
	}
	if cfg.API.MaxWaitingReads == 0 {
		cfg.API.MaxWaitingReads = DefaultMaxWaitingReads
	}
	if cfg.API.MaxLimit == 0 {
		cfg.API.MaxLimit = DefaultMaxLimit
	}
	if cfg.API.MaxFollowers == 0 {
		cfg.API.MaxFollowers = DefaultMaxFollowers
	}
	m := newMetrics(cfg.Version)
	// One log line per store outage, not one per failed request.
	health := &storeHealth{log: log}
	log = slog.New(storeLogHandler{inner: log.Handler(), h: health})
	peers := cfg.API.peers
	if peers == nil || cfg.FleetSecret == "" || peers.self != cfg.Node || !bytes.Equal(peers.key, derivePeerKey(cfg.FleetSecret)) {
		// Not the starting handler's verifier (WithFleetSecret): one of its own.
		peers = newPeerVerifier(cfg.FleetSecret, cfg.Node)
	}
	cfg.API.peers = nil // handler sets it
	d := &Daemon{cfg: cfg, log: log, m: m, cells: map[string]*cell{}, fenced: make(chan error, 1), peers: peers}
	d.streamsCtx, d.endStreams = context.WithCancel(context.Background())
	d.b = instrumented{b: b, m: m, h: health}
	d.logOpts = replication.Shared(replication.WithLogger(log), replication.WithCommitObserver(m.observeCommit),
		replication.WithIdempotencyWindow(cfg.KeyWindow, cfg.KeyLimit))
	n, err := d.newNode()
	if err != nil {
		return nil, err
	}
	if err := n.Open(ctx); err != nil {
		return nil, err
	}
	d.node = n
	m.nodeLeaseHeld.Set(1)
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel, d.bg = cancel, wctx
	d.wg.Add(1)
	go d.watchNode(wctx, n)
	d.startIdleSweep(wctx)
	d.startRebalancer(wctx)
	d.startRetention(wctx)
	return d, nil
}

func (d *Daemon) newNode() (*owner.Node, error) {
	return owner.NewNode(d.b, owner.Config{
		Name: d.cfg.Node, Addr: d.cfg.Advertise, TTL: d.cfg.TTL, Logger: d.log, Weight: d.cfg.Weight,
		LeaseKey: owner.LeaseKey(d.cfg.FleetSecret),
		// No record watch: it would cost one GET per held cell every
		// TTL/3; the daemon's cells learn of a takeover on their next
		// write, where the epoch fence refuses it (DEED-E021).
		WatchInterval: -1,
		Hooks: owner.Hooks{
			Claim: func(cell, result, reason string) {
				d.m.observeClaim(result, reason)
				if isTakeover(result, reason) {
					d.events.add(Event{Kind: "takeover", Cell: cell, Detail: reason})
				}
			},
			Renew: func(result string) { d.m.renewals.WithLabelValues(result).Inc() },
			Fence: func(reason string) {
				d.m.fences.WithLabelValues(reason).Inc()
				d.events.add(Event{Kind: "fence", Node: d.cfg.Node, Detail: reason})
			},
			Wait: func(left time.Duration) {
				d.log.Info("waiting out this node's earlier incarnation before acting", "left", left.Round(time.Second))
			},
		},
	})
}

// watchNode waits for the node to fence. Its leases have ended by then;
// the daemon drops its cells and, unless FenceExit, opens a new
// incarnation, which waits out the old one's TTL before it may act.
func (d *Daemon) watchNode(ctx context.Context, n *owner.Node) {
	defer d.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.Done():
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return
		}
		d.node = nil
		d.fencedObs = n.Observer()
		dropped := d.cells
		d.cells = map[string]*cell{}
		d.mu.Unlock()
		d.m.nodeLeaseHeld.Set(0)
		d.m.cellsHeld.Set(0)
		for _, c := range dropped {
			c.mu.Lock()
			if c.log != nil {
				d.dropLog(c.log, n.Err())
			}
			c.mu.Unlock()
		}
		d.log.Error("node fenced; dropped every cell", "err", n.Err(), "cells", len(dropped))
		if d.cfg.FenceExit {
			d.fenced <- n.Err()
			return
		}
		fctx, stopRefresh := context.WithCancel(ctx)
		d.wg.Add(1)
		go d.refreshFenced(fctx, n.Observer())
		for {
			nn, err := d.newNode()
			if err == nil {
				err = nn.Open(ctx)
			}
			if err == nil {
				stopRefresh()
				d.mu.Lock()
				d.node, d.fencedObs = nn, nil
				d.mu.Unlock()
				d.m.nodeLeaseHeld.Set(1)
				d.log.Info("node lease regained", "incarnation", nn.Incarnation())
				n = nn
				break
			}
			if ctx.Err() != nil {
				stopRefresh()
				return
			}
			d.log.Warn("regaining node lease failed; retrying", "err", err)
			if wait.Sleep(ctx, d.cfg.TTL/3) != nil {
				stopRefresh()
				return
			}
		}
	}
}

// refreshFenced lists the node leases into a fenced incarnation's
// observer every TTL/3 (TTL/30 after a failed LIST) until ctx ends (the node lease is regained): its
// view stays as fresh as a live node's, for routing only (routeView).
func (d *Daemon) refreshFenced(ctx context.Context, o *owner.Observer) {
	defer d.wg.Done()
	for {
		// At once first: the fence may have followed a spell of failed
		// LISTs. A failed one (the view ages into "dead") is tried again
		// soon: the store may be back any moment.
		every := d.cfg.TTL / 3
		if o.Refresh(ctx) != nil {
			every = d.cfg.TTL / 30
		}
		if wait.Sleep(ctx, every) != nil {
			return
		}
	}
}

// Fenced delivers the fence error when the node fenced and
// Config.FenceExit is set; the caller then closes the daemon and exits.
func (d *Daemon) Fenced() <-chan error { return d.fenced }

// currentNode is the node to act as, or DEED-E025 while fenced.
func (d *Daemon) currentNode() (*owner.Node, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errcode.Errorf(errcode.CodeNodeFenced, "node %s is shutting down", d.cfg.Node)
	}
	if d.node == nil {
		return nil, errcode.Errorf(errcode.CodeNodeFenced, "node %s is fenced and regaining its node lease", d.cfg.Node)
	}
	return d.node, nil
}

// fencedNow reports whether the node is fenced (its lease lost, not yet
// regained) and not closed.
func (d *Daemon) fencedNow() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.node == nil && !d.closed
}

// ready reports whether the node lease is held.
func (d *Daemon) ready() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.node != nil && !d.closed && d.node.Err() == nil
}

// held returns the lease and log of name if this node holds it, or nil.
func (d *Daemon) held(name string) *holding {
	d.mu.Lock()
	c := d.cells[name]
	d.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.live()
}

// live returns c's lease and log if its lease is live, or nil.
func (c *cell) live() *holding {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lease == nil || c.lease.Err() != nil {
		return nil
	}
	return c.holding()
}

// cellEntries is a snapshot of the cell entries, for the listings and
// sweeps that then look at each cell under its own lock, never under d.mu.
func (d *Daemon) cellEntries() []*cell {
	d.mu.Lock()
	defer d.mu.Unlock()
	cells := make([]*cell, 0, len(d.cells))
	for _, c := range d.cells {
		cells = append(cells, c)
	}
	return cells
}

// acquire returns the cell with a live lease and an open log, claiming it
// first when this node does not hold it (force: even from a live owner, and
// even when held here — a forced re-claim bumps the epoch).
func (d *Daemon) acquire(ctx context.Context, name string, force bool) (*holding, error) {
	if err := owner.ValidateName("cell", name); err != nil {
		return nil, err
	}
	var c *cell
	for {
		d.mu.Lock()
		c = d.cells[name]
		if c == nil {
			// The name the cell keeps (and its lease, log and the node's
			// maps share) is a copy of its own: a request's name is a part
			// of its path, which would otherwise stay alive with it.
			name = strings.Clone(name)
			c = &cell{name: name}
			d.cells[name] = c
		}
		d.mu.Unlock()
		c.lastUsed.Store(time.Now().UnixNano())
		c.mu.Lock()
		// A request that waited on a cell while it was released or
		// retired may find the entry gone from the map: it starts over
		// on the current one, so that no lease is ever claimed into an
		// entry nobody can find.
		d.mu.Lock()
		current := d.cells[name] == c
		d.mu.Unlock()
		if current {
			break
		}
		c.mu.Unlock()
	}
	defer c.mu.Unlock()
	if c.lease != nil && c.lease.Err() == nil {
		switch {
		case c.releasing:
			return nil, errcode.Errorf(errcode.CodeUnavailable, "cell %s is being released, or its release failed: retry the release", name)
		case !force:
			return c.holding(), nil
		}
	}
	if !force {
		// A cell this node has just handed off, or any free cell asked of
		// a draining node, is claimed elsewhere: the request is forwarded.
		if err := d.movedAway(ctx, name); err != nil {
			d.dropIfEmpty(c)
			return nil, err
		}
	}
	oldLease, oldLog := c.lease, c.log
	n, err := d.currentNode()
	if err != nil {
		d.dropIfEmpty(c)
		return nil, err
	}
	l, err := n.Claim(ctx, c.name, owner.ClaimOptions{Force: force})
	if err != nil {
		d.dropIfEmpty(c)
		return nil, err
	}
	lg, err := replication.Open(ctx, d.b, l, d.logOpts)
	if err != nil {
		// Not able to fence the predecessors: give the cell back so another
		// node (or a retry) can.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.TTL)
		if rerr := l.Release(rctx); rerr != nil {
			// The record still names this node: its next claim here
			// re-enters the cell, a peer's waits for the node lease.
			d.log.Warn("giving the cell back after its log failed to open failed", "cell", c.name, "epoch", l.Epoch(), "open_err", err, "err", rerr)
		}
		cancel()
		d.dropIfEmpty(c)
		return nil, err
	}
	if oldLog != nil && oldLease != nil {
		// A forced re-claim of a cell held here: the claim ended the old
		// lease and Open sealed its chain, so its log has nothing left to
		// do; leaseEnded will not see it once c holds the new one.
		oldLog.Abandon()
	}
	c.lease, c.log, c.releasing = l, lg, false
	d.ho.mu.Lock()
	d.ho.noteFreshLocked(c.name) // the rebalancer looks at it once
	d.ho.mu.Unlock()
	d.m.cellsHeld.Set(float64(d.countHeld()))
	d.nudgeIdleSweep()
	// Every lease ends, at the latest when the node closes or fences, so
	// leaseEnded always runs; no goroutine waits for it meanwhile.
	d.wg.Add(1)
	l.AfterEnd(func() { d.leaseEnded(c, l) })
	return c.holding(), nil
}

// closedUnder turns the refusal of a log that was closed under a request
// (DEED-E040 "log closed": a release, the drain, or a lease that ended and
// whose log was dropped and sealed) into what happened: the lease was
// superseded (DEED-E021) or the node fenced (DEED-E025); otherwise the cell
// is being released or the node drains, and the client should retry
// (DEED-E011). It is not the client's bad request.
func closedUnder(h *holding, err error) error {
	if !errors.Is(err, replication.ErrClosed) {
		return err
	}
	if lerr := h.lease.Err(); lerr != nil {
		switch errcode.CodeOf(lerr) {
		case errcode.CodeSuperseded, errcode.CodeNodeFenced:
			return errcode.Wrap(lerr, "cell %s", h.name)
		}
	}
	return errcode.Errorf(errcode.CodeUnavailable, "cell %s: its log was closed under this request (the cell is being released or the node is shutting down); retry: %v", h.name, err)
}

// dropIfEmpty removes a cell entry that never got a lease; c.mu is held.
func (d *Daemon) dropIfEmpty(c *cell) {
	if c.lease != nil && c.lease.Err() == nil {
		return
	}
	d.mu.Lock()
	if d.cells[c.name] == c {
		delete(d.cells, c.name)
	}
	d.mu.Unlock()
}

// leaseEnded forgets the cell when its lease has ended (superseded,
// released, node fenced) so the next request claims afresh.
func (d *Daemon) leaseEnded(c *cell, l *owner.Lease) {
	defer d.wg.Done()
	c.mu.Lock()
	if c.lease == l {
		if c.log != nil {
			d.dropLog(c.log, l.Err())
		}
		c.lease, c.log = nil, nil
		d.dropIfEmpty(c)
	}
	c.mu.Unlock()
	d.m.cellsHeld.Set(float64(d.countHeld()))
	if err := l.Err(); errcode.CodeOf(err) == errcode.CodeSuperseded {
		d.log.Warn("lease lost", "cell", l.Cell(), "epoch", l.Epoch(), "err", err)
	}
}

func (d *Daemon) countHeld() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.cells)
}

// dropLog lets go of the log of a lease that ended with why. A node that
// fenced and is about to exit (FenceExit) abandons it: it most likely
// cannot reach the store, sealing would cost up to a TTL per log, and the
// seal is only a courtesy, as the next owner seals the chain itself.
// Otherwise the log is sealed in the background.
func (d *Daemon) dropLog(lg *replication.Log, why error) {
	if d.cfg.FenceExit && errcode.CodeOf(why) == errcode.CodeNodeFenced {
		lg.Abandon()
		return
	}
	d.sealDropped(lg)
}

// sealDropped closes, in the background and for at most one TTL, a log
// whose lease has ended. Closing tries to seal the log's own chain end,
// which is safe whatever ended the lease: the seal is a create-only write in
// our own epoch, and if a successor sealed that slot first, ours is refused.
// It spares the next owner the walk to the chain's end.
func (d *Daemon) sealDropped(lg *replication.Log) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.TTL)
		defer cancel()
		if err := lg.Close(ctx); err != nil {
			// Only a courtesy (the next owner seals the chain itself):
			// at debug when the store is unreachable, which is logged
			// once per outage already, else a warning.
			lvl := slog.LevelWarn
			if errcode.CodeOf(err) == errcode.CodeUnavailable {
				lvl = slog.LevelDebug
			}
			d.log.Log(context.Background(), lvl, "sealing a dropped cell's log failed; its next owner seals it", "cell", lg.Cell(), "epoch", lg.Epoch(), "err", err)
		}
	}()
}

// release seals the cell's log and releases its record, so a peer can
// claim it at once and start without walking the chain.
func (d *Daemon) release(ctx context.Context, name string) (owner.Record, error) {
	return d.retire(ctx, name, "release")
}

// retire is every graceful end of a cell held here (an operator's release,
// a move, an idle release, a drain; reason says which, for logs): requests
// for the cell wait on its lock meanwhile, appends already queued are
// written, the log is sealed, then the record is released. A request whose
// append met the closing log is retried by its handler (retiredUnder), so
// a retire never turns into a refusal for a client. DEED-E024 when the cell
// is not held here. If sealing or releasing fails, appends stay refused
// (DEED-E011) until a retried retire succeeds.
func (d *Daemon) retire(ctx context.Context, name, reason string) (owner.Record, error) {
	if err := owner.ValidateName("cell", name); err != nil {
		return owner.Record{}, err
	}
	d.mu.Lock()
	c := d.cells[name]
	d.mu.Unlock()
	if c != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
	}
	if c == nil || c.lease == nil || c.lease.Err() != nil {
		d.m.releases.WithLabelValues("not_holder").Inc()
		rec, _, _ := owner.Inspect(ctx, d.b, name)
		return rec, errcode.Errorf(errcode.CodeNotHolder, "release %s: not held by this node (%s)", name, d.cfg.Node)
	}
	l, lg := c.lease, c.log
	// From here on appends are refused; if the release fails, they stay
	// refused until a retried release succeeds (Close can be retried).
	c.releasing = true
	// A log ended by a bug (replication.ErrInternal) has nothing to seal:
	// the lease is released all the same, so the cell can be claimed
	// afresh; its next owner seals the chain.
	if err := lg.Close(ctx); err != nil && !errors.Is(err, replication.ErrInternal) {
		d.m.releases.WithLabelValues("error").Inc()
		return owner.Record{}, errcode.Wrap(err, "release %s", name)
	}
	if err := l.Release(ctx); err != nil {
		d.m.releases.WithLabelValues("error").Inc()
		return owner.Record{}, err
	}
	d.m.releases.WithLabelValues("ok").Inc()
	c.retired = l
	d.log.Debug("cell retired", "cell", name, "epoch", l.Epoch(), "reason", reason)
	return owner.Record{Node: "", Epoch: l.Epoch()}, nil
}

// EndStreams ends every event stream this node serves (each says so in a
// last event "error", DEED-E011: reconnect through another node) and any
// started later: call it when the server shuts down, whose wait for
// handlers would otherwise wait out the streams. Close calls it too.
func (d *Daemon) EndStreams() { d.endStreams() }

// Close drains: every log is sealed and every cell released, then the node
// lease is marked released, so peers can claim everything at once.
func (d *Daemon) Close(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	n := d.node
	d.mu.Unlock()
	d.EndStreams()
	// Once closed is set acquire claims nothing, so a cell entered after
	// this snapshot gets no lease: the snapshot holds every cell to drain.
	cells := d.cellEntries()
	// No idle release may start on a cell the drain is about to seal.
	d.stopIdleSweep()

	var errs []error
	var wg sync.WaitGroup
	var emu sync.Mutex
	sem := make(chan struct{}, 32) // bounded parallel drain
	for _, c := range cells {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c.mu.Lock()
			l, lg := c.lease, c.log
			c.mu.Unlock()
			if l == nil || l.Err() != nil {
				return
			}
			err := lg.Close(ctx)
			if err == nil || errors.Is(err, replication.ErrInternal) { // see retire
				err = l.Release(ctx)
			}
			if err != nil {
				emu.Lock()
				errs = append(errs, fmt.Errorf("drain %s: %w", c.name, err))
				emu.Unlock()
			}
		})
	}
	wg.Wait()
	if n != nil {
		if err := n.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	d.cancel()
	// Every lease has ended by now (released, or ended by n.Close), so the
	// wait is short; it is still bounded, so that a bug can cost a log
	// line, not a shutdown that never ends.
	waited := make(chan struct{})
	go func() { d.wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("drain: background work still running: %w", ctx.Err()))
	}
	d.m.nodeLeaseHeld.Set(0)
	d.m.cellsHeld.Set(0)
	d.log.Info("drained", "cells", len(cells), "errors", len(errs))
	return errors.Join(errs...)
}
