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
// seen. Refresh costs one LIST of nodes/ (plus a GET of each lease whose
// ETag changed, to learn its address and released flag), so a daemon's
// steady-state cost grows with nodes, never with cells.
type Observer struct {
	b bucket.Bucket
	p Params

	mu        sync.Mutex
	obs       map[string]Observation
	refreshed time.Time // local time of the last complete Refresh
}

// NewObserver makes an observer with no history: every node it sees for the
// first time is alive for at least TTL+margin of this process's time.
func NewObserver(b bucket.Bucket, p Params) *Observer {
	return &Observer{b: b, p: p, obs: map[string]Observation{}}
}

// Refresh lists every node lease and updates the observations.
func (o *Observer) Refresh(ctx context.Context) error {
	sent := time.Now()
	page, err := bucket.ListAll(ctx, o.b, bucket.ListInput{Prefix: NodesPrefix})
	if err != nil {
		return fmt.Errorf("observe nodes: %w", err)
	}
	now := time.Now()
	seen := map[string]bool{}
	for _, info := range page.Objects {
		node, ok := strings.CutSuffix(strings.TrimPrefix(info.Key, NodesPrefix), ".json")
		if !ok || ValidateName("node", node) != nil {
			continue
		}
		seen[node] = true
		if o.confirm(node, info.ETag, sent) {
			continue
		}
		if err := o.fetch(ctx, node); err != nil {
			return err
		}
	}
	o.mu.Lock()
	for node, ob := range o.obs {
		if !seen[node] && ob.Exists {
			o.obs[node] = Observation{Node: node, FirstSeen: now}
		}
	}
	o.refreshed = now
	o.mu.Unlock()
	return nil
}

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
	ob := Observation{Node: node, Exists: true, ETag: obj.ETag}
	if perr == nil {
		ob.Released, ob.Addr, ob.Incarnation = rec.Released, rec.Addr, rec.Incarnation
		ob.TTL = rec.TTL()
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
	} else {
		ob.FirstSeen = answered
		ob.Confirmed = sent
	}
	o.obs[ob.Node] = ob
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
	ob.Confirmed = later(ob.Confirmed, sent)
	o.obs[node] = ob
	return true
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
		Exists: ob.Exists, Unchanged: now.Sub(ob.FirstSeen), Corrupt: ob.Corrupt}
}

// Alive judges one node from this observer's history (false if never seen).
func (o *Observer) Alive(node string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	ob, ok := o.obs[node]
	return ok && Alive(ob, time.Now(), o.p)
}
