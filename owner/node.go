package owner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/internal/wait"
)

// Defaults for a node's timings.
const (
	DefaultTTL    = 10 * time.Second
	DefaultMargin = time.Second
)

// Config configures a Node.
type Config struct {
	// Name is the node id, stable across restarts (a hostname, a pod name).
	Name string
	// Addr is the address peers should be sent to; stored in the node lease
	// and reported in DEED-E020 errors.
	Addr string
	// TTL is the node lease's time to live (default 10s, MinTTL..MaxTTL);
	// it is renewed every TTL/3. Margin (default 1s, or TTL/10 when that is smaller) absorbs
	// clock-rate differences: a node fences itself at TTL−margin after its
	// last good renewal, peers declare it dead only after TTL+margin.
	TTL, Margin time.Duration
	// Logger receives structured logs with node, cell and epoch attributes.
	Logger *slog.Logger
	// ClaimAttempts bounds re-decisions after 412s and 409s (default 8).
	ClaimAttempts int
	// WatchInterval is how often an opened node re-reads the ownership
	// record of each cell it holds, so that a lease taken over by another
	// node (or released by an operator) ends — Done closes, Err is
	// DEED-E021 — even while its holder writes nothing. 0 means TTL/3;
	// negative turns the watch off, for a holder of many cells that learns
	// of a takeover on its data path instead (the daemon). It costs one
	// GET per held cell and interval. A node that is never opened does not
	// watch: it counts as dead to everyone, so any claim takes its cells.
	WatchInterval time.Duration
	// Weight is the node's placement share, advertised in its lease
	// (0 means 1; at most MaxWeight). Placement is the daemon's; the
	// owner package only carries it.
	Weight float64
	// LeaseKey (LeaseKey of the fleet secret; nil without one) signs this
	// node's lease and verifies its peers': only a peer whose lease
	// verifies is a member (Observation.Verified).
	LeaseKey []byte
	// Hooks lets tests and metrics observe lifecycle events. Optional.
	Hooks Hooks
	// WallClock stamps at_ms in the ownership records and node leases this
	// node writes (default time.Now). at_ms is for people reading the
	// bucket: liveness never reads it, so a wrong wall clock cannot make a
	// peer call this node dead. The simulation skews it to check that.
	WallClock func() time.Time
}

// Hooks are optional callbacks; they must not block.
type Hooks struct {
	// Claim is called after every claim attempt finished: result is
	// "ok", "held", "corrupt", "error"; reason is the Decision's reason.
	Claim func(cell, result, reason string)
	// Renew is called after every node-lease renewal attempt ("ok",
	// "error", "replaced").
	Renew func(result string)
	// Fence is called once when the node fences itself, with the reason:
	// "unreachable" (the deadline passed after renewal attempts failed:
	// the store or the network), "expired" (it passed with no attempt
	// failing: this process was paused or too slow, or the answer came
	// too late), "replaced" or "deleted" (someone else wrote the lease).
	Fence func(reason string)
	// Wait is called while Open waits out an earlier incarnation's lease
	// of this node id (a restart), about once a second, with the time left
	// before the lease may be taken over; a CLI shows it as a countdown.
	Wait func(left time.Duration)
}

func (c *Config) params() Params { return Params{TTL: c.TTL, Margin: c.Margin} }

// Node is one deed participant: a node id with a node lease, the cells it
// holds, and an observer of its peers.
//
// A Node that is never opened can still claim (the CLI's one-shot claim),
// but without a node lease it is dead to every observer at once, so its
// claims hold only until someone else claims.
type Node struct {
	b           bucket.Bucket
	cfg         Config
	log         *slog.Logger
	incarnation string
	obs         *Observer

	mu    sync.Mutex
	held  map[string]*Lease
	hints hintTable // cells not held, for a claim's first write (claimFirst)
	// sealedAt is the chain end a held lease's log sealed (Lease.NoteEnd),
	// for its release to record; prevEnds is the predecessor's chain end
	// a lease's claim learned, until its log takes it (Lease.TakePrevEnd).
	// Both are dropped when the lease ends.
	sealedAt map[*Lease]sealedEnd
	// unmarked is the Record.Announces of the record a held lease's
	// claim replaced, when it had one (Lease.Unmarked).
	unmarked map[*Lease]uint64
	prevEnds map[*Lease]PrevEnd
	opened   bool
	closed   bool
	draining bool
	fenced   chan struct{} // closed when the node fences or closes
	ferr     error
	etag     string // the node lease's current ETag
	seq      uint64
	// lastSend is the send time of the last node-lease write that
	// succeeded (acquire or renewal): the fence deadline counts from it.
	lastSend time.Time
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// NewNode validates cfg and returns a Node; it performs no I/O.
func NewNode(b bucket.Bucket, cfg Config) (*Node, error) {
	if err := ValidateName("node", cfg.Name); err != nil {
		return nil, err
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Margin == 0 {
		cfg.Margin = min(DefaultMargin, cfg.TTL/10)
	}
	if err := cfg.params().Validate(); err != nil {
		return nil, err
	}
	if len(cfg.Addr) > MaxAddrLen {
		return nil, errcode.Errorf(errcode.CodeBadRequest, "node %s: address of %d bytes, limit %d", cfg.Name, len(cfg.Addr), MaxAddrLen)
	}
	if cfg.Weight < 0 || cfg.Weight > MaxWeight || cfg.Weight != cfg.Weight {
		return nil, errcode.Errorf(errcode.CodeBadRequest, "node %s: weight %v outside 0..%d", cfg.Name, cfg.Weight, MaxWeight)
	}
	if cfg.ClaimAttempts <= 0 {
		cfg.ClaimAttempts = 8
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.WallClock == nil {
		cfg.WallClock = time.Now
	}
	return &Node{
		b:           b,
		cfg:         cfg,
		log:         cfg.Logger.With("node", cfg.Name),
		incarnation: newNonce(),
		obs:         NewObserver(b, cfg.params()).VerifyWith(cfg.LeaseKey),
		held:        map[string]*Lease{},
		fenced:      make(chan struct{}),
	}, nil
}

// Name is the node id.
func (n *Node) Name() string { return n.cfg.Name }

// Incarnation identifies this process's run of the node id.
func (n *Node) Incarnation() string { return n.incarnation }

// Observer is the node's view of its peers.
func (n *Node) Observer() *Observer { return n.obs }

// Params are the node's liveness timings.
func (n *Node) Params() Params { return n.cfg.params() }

// Done is closed when the node stops acting as owner: fenced or closed.
func (n *Node) Done() <-chan struct{} { return n.fenced }

// Err is nil while the node is open (or was never opened); DEED-E025 after
// it fenced, with the reason in the message.
func (n *Node) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ferr
}

// FenceDeadline is when the node stops acting as owner unless a renewal
// sent before then succeeds: TTL−margin after the send time of the last
// node-lease write that succeeded. It moves forward only once a renewal
// has succeeded, and it is zero while the node is not open. A process that
// runs work on the node's behalf (deed exec) hands it to a watchdog that is
// not paused with it, so that the work stops by this time even when the
// process that renews is stopped.
func (n *Node) FenceDeadline() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lastSend.IsZero() {
		return time.Time{}
	}
	return FenceDeadline(n.lastSend, n.cfg.params())
}

// Held returns the leases this node holds now.
func (n *Node) Held() []*Lease {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*Lease, 0, len(n.held))
	for _, l := range n.held {
		out = append(out, l)
	}
	return out
}

// Lease returns the live lease this node holds on cell, if any.
func (n *Node) Lease(cell string) (*Lease, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, ok := n.held[cell]
	return l, ok
}

// Open creates the node lease and starts renewing it and observing peers.
// If the lease exists, is not released and belongs to another incarnation,
// Open watches it for the longer of its own TTL and the one the lease
// advertises, plus the margin: if it changes, a live process already runs
// as this node and Open fails with DEED-E020; if it stays unchanged, that
// process is dead and Open takes the lease over.
func (n *Node) Open(ctx context.Context) error {
	n.mu.Lock()
	if n.opened || n.closed {
		n.mu.Unlock()
		return fmt.Errorf("open node %s: already opened", n.cfg.Name)
	}
	n.mu.Unlock()
	sent, err := n.acquire(ctx)
	if err != nil {
		return errcode.Wrap(err, "open node %s", n.cfg.Name)
	}
	n.observeSelf()
	if err := n.obs.Refresh(ctx); err != nil {
		n.log.Warn("initial peer observation failed", "err", err)
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.mu.Lock()
	n.opened = true
	n.cancel = cancel
	n.lastSend = sent
	n.mu.Unlock()
	n.wg.Add(2)
	go n.loop(lctx, sent)
	go n.watch(lctx)
	if every := n.cfg.watchInterval(); every > 0 {
		n.wg.Add(1)
		go n.watchHeld(lctx, every)
	}
	n.log.Info("node opened", "incarnation", n.incarnation, "ttl", n.cfg.TTL)
	return nil
}

// acquire creates or takes over nodes/<me>.json and returns the send time
// of the write that succeeded: the fence deadline counts from it.
func (n *Node) acquire(ctx context.Context) (time.Time, error) {
	key := NodeKey(n.cfg.Name)
	p := n.cfg.params()
	var watchedSince time.Time
	var watchedETag string
	for {
		obj, err := getRecord(ctx, n.b, key, "node lease")
		cond := bucket.IfAbsent
		switch {
		case errors.Is(err, bucket.ErrNotFound):
		case err != nil && !errors.Is(err, bucket.ErrTooLarge):
			return time.Time{}, err
		default:
			// Garbage (too large, or not a lease) is taken over at once,
			// with If-Match on the version read, like a released lease.
			rec, perr := parseNodeRecord(key, n.cfg.Name, obj.Body)
			if err != nil {
				rec, perr = NodeRecord{}, err
			}
			mine := perr == nil && rec.Incarnation == n.incarnation
			if perr == nil && !rec.Released && !mine {
				now := time.Now()
				if watchedETag == "" || !bucket.SameETag(watchedETag, obj.ETag) {
					if watchedETag != "" {
						return time.Time{}, errcode.Errorf(errcode.CodeHeld, "node id %s is in use by a live process (incarnation %s, addr %s)", n.cfg.Name, rec.Incarnation, rec.Addr)
					}
					watchedETag, watchedSince = obj.ETag, now
				}
				// Judging at the answer's arrival rather than at the GET's
				// send time (as a claimer must, see Observer.fetch) is safe
				// here: the takeover below is If-Match on the very version
				// read, so a renewal that landed after the GET was served
				// makes it fail with 412.
				//
				// The wait is the longer of this process's TTL and the
				// one the lease advertises (as Alive judges): the holder
				// fences itself by its own TTL, so a process started with a
				// shorter one (`deed claim --hold --ttl 1s`) must not take
				// over a live daemon's lease of a longer TTL between two of
				// its renewals.
				if left := max(p.TTL, rec.TTL()) + p.Margin - now.Sub(watchedSince); left >= 0 {
					if now.Equal(watchedSince) {
						n.log.Info("node lease held by another incarnation; watching it", "incarnation", rec.Incarnation)
					}
					if n.cfg.Hooks.Wait != nil {
						n.cfg.Hooks.Wait(left)
					}
					// Looking again every second (at most) lets the hook
					// count down; a live process is still seen by its
					// renewal, every TTL/3.
					if err := wait.Sleep(ctx, min(p.TTL/3, time.Second)); err != nil {
						return time.Time{}, err
					}
					continue
				}
			}
			n.mu.Lock()
			n.seq = rec.Seq
			n.mu.Unlock()
			cond = bucket.IfMatch(obj.ETag)
		}
		sent := time.Now()
		n.mu.Lock()
		n.seq++
		body := n.nodeRecord(false).marshal()
		n.mu.Unlock()
		etag, err := n.b.Put(ctx, key, body, cond)
		switch {
		case err == nil:
		case errors.Is(err, bucket.ErrPrecondition):
			continue // someone moved it: look again
		case errors.Is(err, bucket.ErrConflict), errors.Is(err, bucket.ErrAmbiguous):
			got, gerr := getRecord(ctx, n.b, key, "node lease")
			if gerr != nil || string(got.Body) != string(body) {
				// Did not land, or cannot tell yet: back off, decide again.
				if err := wait.Sleep(ctx, backoffStep(p)); err != nil {
					return time.Time{}, err
				}
				continue
			}
			etag = got.ETag
		default:
			return time.Time{}, err
		}
		n.mu.Lock()
		n.etag = etag
		n.mu.Unlock()
		return sent, nil
	}
}

// nodeRecord builds the lease body; n.mu must be held.
func (n *Node) nodeRecord(released bool) NodeRecord {
	return NodeRecord{Node: n.cfg.Name, Incarnation: n.incarnation, Addr: n.cfg.Addr,
		TTLMS: n.cfg.TTL.Milliseconds(), Seq: n.seq, AtMS: n.cfg.WallClock().UnixMilli(), Released: released,
		Weight: n.cfg.Weight, Draining: n.draining, Cells: len(n.held)}.padded(n.cfg.LeaseKey).sign(n.cfg.LeaseKey)
}

// SetDraining marks the node as draining (or not) in its lease from the next
// renewal on, so peers leave it out of placement; it writes nothing now.
func (n *Node) SetDraining(on bool) {
	n.mu.Lock()
	n.draining = on
	n.mu.Unlock()
}

// Draining reports what SetDraining last set.
func (n *Node) Draining() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.draining
}

// loop renews the node lease every TTL/3, refreshes peer observations, and
// fences the node when no renewal succeeded within TTL−margin of the send
// time of the last good one. lastSend is the send time of the acquire.
func (n *Node) loop(ctx context.Context, lastSend time.Time) {
	defer n.wg.Done()
	p := n.cfg.params()
	interval := p.TTL / 3
	next := renewAt(lastSend, interval)
	backoff := p.TTL / 50
	var failed error // the last renewal attempt's error, nil after a success
	for {
		deadline := FenceDeadline(lastSend, p)
		wait := time.Until(next)
		if d := time.Until(deadline); d < wait {
			wait = d
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		now := time.Now()
		if !now.Before(deadline) {
			if failed != nil {
				n.fence("unreachable", fmt.Errorf("no renewal succeeded within ttl-margin (%v) of %v; last attempt: %w", p.TTL-p.Margin, lastSend.Format(time.RFC3339Nano), failed))
			} else {
				n.fence("expired", fmt.Errorf("no renewal attempt within ttl-margin (%v) of %v: the process was paused or too slow", p.TTL-p.Margin, lastSend.Format(time.RFC3339Nano)))
			}
			return
		}
		sent := now
		rctx, cancel := context.WithTimeout(ctx, RenewTimeout(now, deadline, p))
		result, err := n.renew(rctx, deadline)
		cancel()
		if n.cfg.Hooks.Renew != nil {
			n.cfg.Hooks.Renew(result)
		}
		if result == "ok" && time.Now().After(deadline) {
			// Its answer came too late: the node must not have acted past
			// its deadline, whatever the store says now.
			n.fence("expired", fmt.Errorf("renewal answered after the fence deadline %v", deadline.Format(time.RFC3339Nano)))
			return
		}
		switch result {
		case "ok":
			failed = nil
			lastSend = sent
			n.mu.Lock()
			n.lastSend = sent
			n.mu.Unlock()
			next = renewAt(sent, interval)
			backoff = p.TTL / 50
			n.observeSelf()
			// The LIST waits for the peers' renewals of this interval to
			// land (listAt). Observing peers must never hold up the next
			// renewal, nor the fence check before it: a slow store would
			// otherwise keep this node acting past its deadline.
			if at := listAt(sent, interval); at.Before(next) {
				t := time.NewTimer(time.Until(at))
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
			octx, ocancel := context.WithDeadline(ctx, next)
			err := n.obs.Refresh(octx)
			ocancel()
			if err != nil && ctx.Err() == nil {
				n.log.Warn("peer observation failed", "err", err)
			}
		case "replaced", "deleted":
			n.fence(result, err)
			return
		default:
			if ctx.Err() != nil {
				return
			}
			// Retry promptly: two slow renewals in a row must not fence a
			// node that still has authority.
			failed = err
			n.log.Warn("node lease renewal failed; retrying", "err", err, "fence_in", time.Until(deadline))
			next = time.Now().Add(backoff)
			backoff = min(backoff*2, interval/2)
		}
	}
}

// Renewals are aligned to a grid of the renewal interval on the wall clock
// (multiples of it since the Unix epoch), the same for every node of a TTL,
// and each node lists nodes/ listOffset into the interval: by then every
// peer whose clock agrees with this node's has renewed, so one LIST sees
// each peer's new version at most listOffset (plus a round trip) after it
// was written, and death, which counts from that first sight, is judged as
// promptly as reading each peer every few hundred milliseconds would. The
// wall clock only schedules: no judgement reads it, so a node whose clock
// is off is still judged safely, only its failover is slower (its version
// is seen up to an interval late, as without alignment).

// listOffset is how far into its renewal interval a node lists nodes/:
// a tenth of it (TTL/30), several store round trips at any TTL.
func listOffset(interval time.Duration) time.Duration { return interval / 10 }

// renewAt is when a node that renewed with a request sent at sent renews
// next: the first grid point more than a quarter interval after sent, so
// between 3/4 and 5/4 of an interval later (one interval once aligned).
func renewAt(sent time.Time, interval time.Duration) time.Time {
	w := sent.UnixNano() + int64(interval/4)
	g := (w/int64(interval) + 1) * int64(interval)
	return sent.Add(time.Duration(g - sent.UnixNano()))
}

// listAt is when a node that renewed at sent lists nodes/: listOffset past
// the grid point its renewal belongs to (the one nearest before a quarter
// interval past sent), or at once if that has passed.
func listAt(sent time.Time, interval time.Duration) time.Time {
	w := sent.UnixNano() + int64(interval/4)
	g := (w / int64(interval)) * int64(interval)
	return sent.Add(time.Duration(g - sent.UnixNano() + int64(listOffset(interval))))
}

// watch reads peers' leases when they are due a new version or could be
// proven dead (see Observer.watchPlan) until the node closes or fences:
// the LIST after each renewal sees a peer's new version up to TTL/3 after
// it was written, and death counts from that first sight.
func (n *Node) watch(ctx context.Context) {
	defer n.wg.Done()
	for {
		read, next := n.obs.watchPlan(n.cfg.Name, time.Now())
		n.obs.watchRead(ctx, read) // those are next due a step from now at the latest
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-n.fenced:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// observeSelf records this node's own lease, as just written, in its
// observer, so that the Refresh after each renewal finds the ETag it
// expects and does not GET the lease this node wrote itself.
func (n *Node) observeSelf() {
	n.mu.Lock()
	etag := n.etag
	n.mu.Unlock()
	n.mu.Lock()
	draining, cells := n.draining, len(n.held)
	n.mu.Unlock()
	n.obs.record(Observation{Node: n.cfg.Name, Exists: true, ETag: etag, Addr: n.cfg.Addr,
		Incarnation: n.incarnation, TTL: n.cfg.TTL, Weight: NodeRecord{Weight: n.cfg.Weight}.EffectiveWeight(),
		Draining: draining, Cells: cells, Verified: n.cfg.LeaseKey != nil}, time.Now(), time.Now())
}

// nextLeaseVersion bumps the sequence number and returns the next node-lease
// body with the ETag it must replace (If-Match).
func (n *Node) nextLeaseVersion(released bool) (body []byte, etag string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.seq++
	return n.nodeRecord(released).marshal(), n.etag
}

// renew writes the next lease version with If-Match on the last ETag. The
// PUT is bounded by ctx (one attempt's timeout); reads that settle its
// outcome get their own context up to the fence deadline, since the PUT's
// may already have expired — the usual way an outcome becomes unknown.
func (n *Node) renew(ctx context.Context, deadline time.Time) (string, error) {
	key := NodeKey(n.cfg.Name)
	body, etag := n.nextLeaseVersion(false)
	newETag, err := n.b.Put(ctx, key, body, bucket.IfMatch(etag))
	if err == nil {
		n.setETag(newETag)
		return "ok", nil
	}
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	switch {
	case errors.Is(err, bucket.ErrPrecondition):
		// 412, or 404 on If-Match (Classify maps it). The lease moved:
		// another writer, or an earlier renewal of ours that landed
		// although its answer was lost.
		return n.settleLease(rctx, key, nil, fmt.Errorf("renew node lease: %w", err))
	case errors.Is(err, bucket.ErrAmbiguous), errors.Is(err, bucket.ErrConflict), errors.Is(err, bucket.ErrUnavailable):
		return n.settleLease(rctx, key, body, fmt.Errorf("renew node lease: %w", err))
	default:
		return "error", fmt.Errorf("renew node lease: %w", err)
	}
}

// settleLease reads the node lease after a renewal that failed with cause
// and says what happened. sent is the body of that renewal when it may have
// landed (nil after a 412, when it did not).
//
//   - it holds sent: the renewal landed ("ok");
//   - it holds another version written under this incarnation: an earlier
//     renewal whose outcome was lost landed; adopt its ETag and retry
//     ("error"). Only this process writes its incarnation, so this is never
//     someone else's write, and fencing on it would fence a healthy node;
//   - it is missing: "deleted"; written by anyone else: "replaced" — both
//     fence at once;
//   - it cannot be read: "error", retry (the next 412, if any, comes back
//     here).
func (n *Node) settleLease(ctx context.Context, key string, sent []byte, cause error) (string, error) {
	got, err := getRecord(ctx, n.b, key, "node lease")
	switch {
	case errors.Is(err, bucket.ErrNotFound):
		return "deleted", fmt.Errorf("node lease %s was deleted: %w", key, cause)
	case errors.Is(err, bucket.ErrTooLarge):
		// Garbage in place of the lease: someone else's write, judged by
		// its ETag below like any other.
	case err != nil:
		return "error", fmt.Errorf("%w (read back: %v)", cause, err)
	}
	if sent != nil && string(got.Body) == string(sent) {
		n.setETag(got.ETag)
		return "ok", nil
	}
	n.mu.Lock()
	current := bucket.SameETag(got.ETag, n.etag)
	n.mu.Unlock()
	if current {
		return "error", cause // nothing landed; retry
	}
	if rec, perr := parseNodeRecord(key, n.cfg.Name, got.Body); perr == nil && rec.Incarnation == n.incarnation && !rec.Released {
		n.setETag(got.ETag)
		n.log.Info("an earlier renewal had landed; adopting it", "seq", rec.Seq)
		return "error", cause
	}
	return "replaced", fmt.Errorf("node lease %s was replaced by another writer: %w", key, cause)
}

func (n *Node) setETag(etag string) {
	n.mu.Lock()
	n.etag = etag
	n.mu.Unlock()
}

// fence stops the node acting as owner: every lease ends with DEED-E025.
func (n *Node) fence(reason string, cause error) {
	err := errcode.Errorf(errcode.CodeNodeFenced, "node fenced (%s): %s: %w", reason, n.cfg.Name, cause)
	n.mu.Lock()
	if n.ferr != nil {
		n.mu.Unlock()
		return
	}
	n.ferr = err
	leases := n.takeHeld()
	close(n.fenced)
	n.mu.Unlock()
	for _, l := range leases {
		l.end(err)
	}
	n.log.Error("node fenced", "reason", reason, "err", cause, "cells", len(leases))
	if n.cfg.Hooks.Fence != nil {
		n.cfg.Hooks.Fence(reason)
	}
}

// takeHeld empties the held map; n.mu must be held.
func (n *Node) takeHeld() []*Lease {
	out := make([]*Lease, 0, len(n.held))
	for _, l := range n.held {
		out = append(out, l)
	}
	n.held = map[string]*Lease{}
	return out
}

// Close releases every held cell, then marks the node lease released, so
// peers may claim everything at once. It does not close data-path logs:
// callers that opened logs close them first (the daemon does).
func (n *Node) Close(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	opened, fenced := n.opened, n.ferr != nil
	leases := make([]*Lease, 0, len(n.held))
	for _, l := range n.held {
		leases = append(leases, l)
	}
	n.mu.Unlock()

	var errs []error
	for _, l := range leases {
		if err := l.Release(ctx); err != nil && l.Err() == nil {
			errs = append(errs, err)
		}
	}
	// Stop acting as owner — every lease not released ends — before the
	// node stops renewing its lease and before it marks it released: from
	// either moment on, peers may call it dead.
	n.mu.Lock()
	var unreleased []*Lease
	if n.ferr == nil {
		n.ferr = errcode.Errorf(errcode.CodeNodeFenced, "node fenced (closed): %s", n.cfg.Name)
		unreleased = n.takeHeld()
		close(n.fenced)
	}
	ferr := n.ferr
	n.mu.Unlock()
	// Not under n.mu: ending a lease calls back into forget, which takes it.
	for _, l := range unreleased {
		l.end(ferr)
	}
	if n.cancel != nil {
		n.cancel()
	}
	n.wg.Wait()
	if opened && !fenced {
		if err := n.releaseNodeLease(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	n.log.Info("node closed", "released_cells", len(leases))
	return errors.Join(errs...)
}

// releaseNodeLease marks the node lease released. A renewal cut off by
// the close may have landed after its answer was lost, leaving the ETag
// this node knows one version behind: a 412 is then settled like a
// renewal's (a lease of this incarnation is adopted) and the release
// sent again, a few times at most.
func (n *Node) releaseNodeLease(ctx context.Context) error {
	key := NodeKey(n.cfg.Name)
	var err error
	for range 3 {
		body, etag := n.nextLeaseVersion(true)
		_, err = n.b.Put(ctx, key, body, bucket.IfMatch(etag))
		if err == nil {
			return nil
		}
		if errors.Is(err, bucket.ErrAmbiguous) {
			if got, gerr := getRecord(ctx, n.b, key, "node lease"); gerr == nil && string(got.Body) == string(body) {
				return nil
			}
		}
		if !errors.Is(err, bucket.ErrPrecondition) {
			break
		}
		if how, _ := n.settleLease(ctx, key, nil, err); how != "error" {
			break // replaced or deleted: not this node's to release
		}
	}
	return fmt.Errorf("release node lease %s: %w", n.cfg.Name, err)
}

// forget drops l from the held map if it is still the lease for its cell.
func (n *Node) forget(l *Lease) {
	n.mu.Lock()
	delete(n.sealedAt, l)
	delete(n.prevEnds, l)
	delete(n.unmarked, l)
	if n.held[l.cell] == l {
		delete(n.held, l.cell)
		if n.ferr == nil {
			n.hints.note(l.cell, Hint{Known: true}, true)
		}
	}
	n.mu.Unlock()
}

// sealedEnd is a chain end a held lease's log sealed (Lease.NoteEnd) and
// the seal's timestamp.
type sealedEnd struct {
	End
	ts int64
}

// backoffStep is the pause after a 409 or an unreadable outcome: short
// against the TTL, so a brief store hiccup costs little.
func backoffStep(p Params) time.Duration { return max(p.TTL/100, 10*time.Millisecond) }

// leaseIncarnation is the incarnation a claim records: this process's, once
// it holds a node lease under it; "" for a node that never opened, whose
// incarnation no lease ever showed.
func (n *Node) leaseIncarnation() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.opened {
		return ""
	}
	return n.incarnation
}
