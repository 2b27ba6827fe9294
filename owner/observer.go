package owner

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/deedkit/deed/bucket"
)

// Observer keeps, per node lease, the ETag and the local time it was first
// seen. Refresh costs one LIST of nodes/ (plus a GET of each lease seen for
// the first time or whose size class changed, to learn what it advertises:
// see leasesize.go), so a daemon's steady-state cost is one LIST per
// interval, whatever the number of nodes or cells.
type Observer struct {
	b   bucket.Bucket
	p   Params
	key []byte // LeaseKey that verifies leases; nil: none is verified

	mu        sync.Mutex
	obs       map[string]Observation
	refreshed time.Time // local time of the last complete Refresh
	// stops counts the nodes this observer has seen stop: lease released
	// or deleted, or proven dead (see stopped). A claimer reads it to
	// guess that cells it knows nothing about are likely a stopped
	// node's, which exist (see hintTable.lean).
	stops uint64
}

// NewObserver makes an observer with no history: every node it sees for the
// first time is alive for at least TTL+margin of this process's time.
func NewObserver(b bucket.Bucket, p Params) *Observer {
	return &Observer{b: b, p: p, obs: map[string]Observation{}}
}

// VerifyWith sets the key (LeaseKey of the fleet secret) that leases are
// verified with, before the observer is used, and returns o. Without one
// no lease is Verified.
func (o *Observer) VerifyWith(key []byte) *Observer {
	o.key = key
	return o
}

// Verifying reports whether the observer verifies leases.
func (o *Observer) Verifying() bool { return o.key != nil }

// Refresh lists every node lease and updates the observations.
func (o *Observer) Refresh(ctx context.Context) error {
	sent := time.Now()
	page, err := bucket.ListAll(ctx, o.b, bucket.ListInput{Prefix: NodesPrefix})
	if err != nil {
		return fmt.Errorf("observe nodes: %w", err)
	}
	now := time.Now()
	seen := map[string]bool{}
	var read []string
	for _, info := range page.Objects {
		node, ok := strings.CutSuffix(strings.TrimPrefix(info.Key, NodesPrefix), ".json")
		if !ok || ValidateName("node", node) != nil {
			continue
		}
		seen[node] = true
		if o.confirm(node, info.ETag, sent) {
			continue
		}
		if o.renewed(node, info, now, sent) {
			continue
		}
		read = append(read, node)
	}
	// Leases seen for the first time or changed, read a few at a time: a
	// node joining a fleet of a thousand reads them all once.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	sem := make(chan struct{}, 16)
	for _, node := range read {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := o.fetch(ctx, node); err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed != nil {
		return failed
	}
	o.mu.Lock()
	for node, ob := range o.obs {
		switch {
		case seen[node]:
		case ob.Exists:
			gone := Observation{Node: node, FirstSeen: now}
			o.countStop(ob, true, gone)
			o.obs[node] = gone
		case now.Sub(ob.FirstSeen) > o.forgetAfter():
			// Gone for a while (every finished deed exec and claim --hold
			// deletes its lease): forgotten, so that the map holds the
			// leases in the bucket and not every node ever seen. Nothing
			// is lost: a node never observed reads as missing, hence dead,
			// at its first look (Observe reads its lease).
			delete(o.obs, node)
		}
	}
	o.refreshed = now
	o.mu.Unlock()
	return nil
}

// forgetAfter is how long a lease that vanished from the bucket stays in
// the observer's view (the status page shows it as missing meanwhile):
// TTL+margin, the time after which a silent node is judged dead anyway.
func (o *Observer) forgetAfter() time.Duration { return o.p.TTL + o.p.Margin }

// Observe returns the observation of one node, reading its lease now when
// this observer has no fresh view of it (never observed, or no Refresh
// within TTL/3). A one-shot CLI claim therefore starts its observation at
// its first look and must wait out TTL+margin before calling a node dead.
//
// A fresh view is trusted only to say the node is alive. One that says it
// is dead is read again: the view may predate the very record the caller
// is judging (a node restarted since the last Refresh, re-acquired its
// lease and claimed the cell), so a takeover always rests on a read made
// after the caller read that record.
func (o *Observer) Observe(ctx context.Context, node string) (Observation, error) {
	return o.observe(ctx, node, "")
}

// observe is Observe for a claimer judging a record written by incarnation
// inc: a view that already proves inc dead (IncarnationDead) is final, so
// the takeover of a long-dead node's cell costs no read of its lease.
func (o *Observer) observe(ctx context.Context, node, inc string) (Observation, error) {
	now := time.Now()
	o.mu.Lock()
	ob, had := o.obs[node]
	fresh := had && now.Sub(o.refreshed) <= o.p.TTL/3 && Alive(ob, now, o.p)
	final := had && IncarnationDead(ob, inc, o.p)
	o.mu.Unlock()
	if fresh || final {
		return ob, nil
	}
	if err := o.fetch(ctx, node); err != nil {
		return Observation{}, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.obs[node], nil
}

// fetch reads one node lease and records it, keeping FirstSeen when the
// ETag is unchanged.
func (o *Observer) fetch(ctx context.Context, node string) error {
	sent := time.Now()
	obj, err := getRecord(ctx, o.b, NodeKey(node), "node lease")
	switch {
	case errors.Is(err, bucket.ErrNotFound):
		o.record(Observation{Node: node}, sent, sent)
		return nil
	case err != nil && !errors.Is(err, bucket.ErrTooLarge):
		return fmt.Errorf("observe node %s: %w", node, err)
	}
	rec, perr := parseNodeRecord(NodeKey(node), node, obj.Body)
	if err != nil {
		perr = err
	}
	ob := Observation{Node: node, Exists: true, ETag: obj.ETag, size: -1}
	if perr == nil {
		ob.size = int64(len(obj.Body))
		ob.Released, ob.Addr, ob.Incarnation = rec.Released, rec.Addr, rec.Incarnation
		ob.TTL = rec.TTL()
		ob.Weight, ob.Draining, ob.Cells = rec.EffectiveWeight(), rec.Draining, rec.Cells
		ob.Verified = rec.verified(o.key)
		if brokenWallClockDeath {
			noteAtMS(ob, rec.AtMS)
		}
	} else {
		ob.Corrupt = perr.Error()
	}
	// A lease that does not parse still changes ETag while its writer
	// renews it, so it is judged by ETag alone like any other, with this
	// observer's TTL: nothing it advertises is believed, so garbage can
	// neither keep a node alive longer nor have it judged dead sooner than
	// a lease of this observer's TTL.
	//
	// A version seen for the first time is stamped when the answer came
	// back, never earlier (not at now, which may precede the GET): a slow
	// GET may return a renewal sent after it left, and an observation must
	// never begin before the renewal it shows was sent.
	o.record(ob, time.Now(), sent)
	return nil
}

// record stores an observation read by a request sent at sent whose answer
// arrived at answered.
func (o *Observer) record(ob Observation, answered, sent time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	prev, had := o.obs[ob.Node]
	if had && prev.Exists == ob.Exists && bucket.SameETag(prev.ETag, ob.ETag) {
		ob.FirstSeen = prev.FirstSeen
		ob.Confirmed = later(prev.Confirmed, sent)
		ob.after = prev.after
	} else {
		ob.FirstSeen = answered
		ob.Confirmed = sent
		if had && prev.Exists {
			// The store still held the previous version when that read
			// was served, so this one was written after it was sent.
			ob.after = prev.Confirmed
		}
	}
	o.countStop(prev, had, ob)
	o.obs[ob.Node] = ob
}

// renewed records the new version a LIST (sent at sent, answered at
// answered) shows of node as a renewal, with no read, when its size class
// is that of the version last read whole: it advertises the same fields
// (see leasesize.go), so only its ETag and first sight are new. It reports
// whether it did; otherwise the caller reads the lease.
func (o *Observer) renewed(node string, info bucket.Info, answered, sent time.Time) bool {
	o.mu.Lock()
	ob, had := o.obs[node]
	o.mu.Unlock()
	if !had || !ob.Exists || ob.Released || ob.Corrupt != "" || ob.size <= 0 || info.Size <= 0 ||
		ob.size%leaseGenMod != info.Size%leaseGenMod {
		return false
	}
	ob.ETag = info.ETag
	o.record(ob, answered, sent)
	return true
}

// confirm notes that a LIST sent at sent still showed etag for node, and
// reports whether that is the version already observed.
func (o *Observer) confirm(node, etag string, sent time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	ob, had := o.obs[node]
	if !had || !ob.Exists || !bucket.SameETag(ob.ETag, etag) {
		return false
	}
	prev := ob
	ob.Confirmed = later(ob.Confirmed, sent)
	o.countStop(prev, true, ob)
	o.obs[node] = ob
	return true
}

// stopped reports whether ob shows its node stopped for good: its lease is
// missing or released, or a read sent more than the wait after the version
// was first seen still showed it (the proof IncarnationDead accepts).
func (o *Observer) stopped(ob Observation) bool {
	return !ob.Exists || ob.Released || provenDead(ob, o.p)
}

// countStop counts a node that ran in prev (when had) and stopped in next;
// o.mu must be held.
func (o *Observer) countStop(prev Observation, had bool, next Observation) {
	if had && !o.stopped(prev) && o.stopped(next) {
		o.stops++
	}
}

// stopCount is how many peers this observer has seen stop so far.
func (o *Observer) stopCount() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stops
}

// watchPlan says which peers (not self) to read now and when to look
// again (at the latest TTL/3 from now, for peers a Refresh may add): a peer
// seen unchanged for its TTL+margin is read as soon as a read can prove it
// dead (IncarnationDead: one sent after that point), once, so that a claim
// of its cells needs no read of its lease. Nothing else is read: a peer's
// renewals are seen by the LIST of nodes/ that follows each of this node's
// renewals, and renewals are aligned (renewAt, listAt) so that the LIST
// comes just after every peer's renewal of the same interval; a peer's
// first sight of its last version, from which its death counts, is
// therefore at most a LIST's offset (TTL/30) and a round trip late.
//
// A peer proven dead, released or gone is left to the LIST of Refresh,
// which notices a restart.
func (o *Observer) watchPlan(self string, now time.Time) (read []string, next time.Time) {
	next = now.Add(o.p.TTL / 3)
	o.mu.Lock()
	defer o.mu.Unlock()
	for node, ob := range o.obs {
		if node == self || o.stopped(ob) {
			continue
		}
		// Not stopped, so not proven: every read so far was sent before
		// the moment a read can prove it dead, which must not be early.
		proof := ob.FirstSeen.Add(max(o.p.TTL, ob.TTL) + o.p.Margin + time.Nanosecond)
		if !proof.After(now) {
			read = append(read, node)
			continue
		}
		if proof.Before(next) {
			next = proof
		}
	}
	sort.Strings(read)
	return read, next
}

// watchRead reads the leases of nodes once each, a few at a time, each
// read bounded by TTL/3. A read only ever moves a first sight later or
// confirms a version, so this cannot make a live node look dead.
func (o *Observer) watchRead(ctx context.Context, nodes []string) {
	if len(nodes) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, o.p.TTL/3)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, node := range nodes {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_ = o.fetch(ctx, node) // a failed read leaves the observation as it was
		})
	}
	wg.Wait()
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// NodeView is a node as the CLI and the daemon show it.
type NodeView struct {
	Node      string        `json:"node"`
	Addr      string        `json:"addr,omitempty"`
	Alive     bool          `json:"alive"`
	Released  bool          `json:"released"`
	Exists    bool          `json:"exists"`
	Unchanged time.Duration `json:"unchanged_ns"` // how long the ETag has been seen unchanged
	// Corrupt is the DEED-E030 error of a lease that is not a valid node
	// lease (see Observation.Corrupt); "" for a valid one.
	Corrupt string `json:"corrupt,omitempty"`
	// Weight, Draining and Cells are what the node's lease advertises
	// (see NodeRecord); Cells is the count at its last renewal.
	Weight   float64 `json:"weight,omitempty"`
	Draining bool    `json:"draining,omitempty"`
	Cells    int     `json:"cells"`
	// Verified says the lease's MAC is right under the fleet's lease key:
	// only a verified node is a member (is sent requests and cells).
	// Always false for an observer without a key.
	Verified bool `json:"verified"`
}

// View judges every observed node at now.
func (o *Observer) View() []NodeView {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]NodeView, 0, len(o.obs))
	for _, ob := range o.obs {
		out = append(out, o.view(ob, now))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

func (o *Observer) view(ob Observation, now time.Time) NodeView {
	return NodeView{Node: ob.Node, Addr: ob.Addr, Alive: Alive(ob, now, o.p), Released: ob.Released,
		Exists: ob.Exists, Unchanged: now.Sub(ob.FirstSeen), Corrupt: ob.Corrupt,
		Weight: ob.Weight, Draining: ob.Draining, Cells: ob.Cells, Verified: ob.Verified}
}

// ReadAll reads every peer's lease (but self's) that is present and not
// known to have stopped, a few at a time: what a renewal taken from the
// LIST alone did not carry (the cells a peer holds) is current afterwards.
// It costs one GET per peer; a status page calls it, at most once per
// TTL/3, while someone looks. Judgements are unchanged by it: a read only
// confirms a version or shows a newer one, stamped at its arrival.
func (o *Observer) ReadAll(ctx context.Context, self string) {
	o.mu.Lock()
	var nodes []string
	for node, ob := range o.obs {
		if node != self && ob.Exists && !o.stopped(ob) {
			nodes = append(nodes, node)
		}
	}
	o.mu.Unlock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, node := range nodes {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_ = o.fetch(ctx, node) // a failed read leaves the observation as it was
		})
	}
	wg.Wait()
}

// Lookup judges one node at now, as View would, without copying the rest.
func (o *Observer) Lookup(node string) (NodeView, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ob, ok := o.obs[node]
	if !ok {
		return NodeView{}, false
	}
	return o.view(ob, time.Now()), true
}

// Alive judges one node from this observer's history (false if never seen).
func (o *Observer) Alive(node string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	ob, ok := o.obs[node]
	return ok && Alive(ob, time.Now(), o.p)
}
