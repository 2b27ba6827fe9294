package daemon

import (
	"hash/fnv"
	"math"

	"github.com/deedkit/deed/owner"
)

// member is a node that placement may choose: alive, not draining, with a
// valid lease that advertises an address and, with a fleet secret, is
// authenticated by it (owner.NodeView.Verified): a lease anyone who can
// write the bucket made up is never sent a request, a cell or a share.
type member struct {
	Name   string
	Addr   string
	Weight float64 // ≥ 1 unless set lower with --weight; never 0
}

// members are the nodes this daemon may place cells on, from its node's
// view of the node leases (one LIST per TTL/3, so no cost per cell): the
// nodes judged alive that do not drain. It includes this node unless it
// drains. Nil while the node is fenced.
func (d *Daemon) members() []member {
	d.mu.Lock()
	n := d.node
	d.mu.Unlock()
	if n == nil {
		return nil
	}
	return liveMembers(n.Observer().View(), n.Observer().Verifying())
}

// routeView is the observer routing looks at: the node's, or while fenced
// the fenced incarnation's (kept fresh), so that a fenced node sends what
// it cannot serve to a live peer. Nil before the daemon is open or after
// it closed. Only routing uses the fenced view: nothing is claimed,
// placed or moved by it.
func (d *Daemon) routeView() *owner.Observer {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
		return nil
	case d.node != nil:
		return d.node.Observer()
	case d.fencedObs != nil:
		return d.fencedObs
	}
	return nil
}

// routeMembers are the members as routing sees them (routeView).
func (d *Daemon) routeMembers() []member {
	o := d.routeView()
	if o == nil {
		return nil
	}
	return liveMembers(o.View(), o.Verifying())
}

// trustedPeer is node as this daemon may send it a request: alive, with a
// valid lease advertising an address and, with a fleet secret, verified;
// draining or not (a draining node still serves the cells it holds).
// Every address a request is forwarded or pushed to comes from here (or
// from members, which holds the same checks), never from what an
// ownership record or an error names.
func (d *Daemon) trustedPeer(node string) (member, bool) {
	o := d.routeView()
	if o == nil {
		return member{}, false
	}
	v, ok := o.Lookup(node)
	if !ok || !v.Alive || v.Corrupt != "" || v.Addr == "" || (o.Verifying() && !v.Verified) {
		return member{}, false
	}
	return member{Name: v.Node, Addr: v.Addr, Weight: max(v.Weight, 1)}, true
}

// liveMembers is the placement set of a view: pure, so that every node
// that sees the same leases places every cell alike. verify (a fleet
// secret is configured) leaves out every lease that does not verify.
func liveMembers(view []owner.NodeView, verify bool) []member {
	out := make([]member, 0, len(view))
	for _, v := range view {
		if !v.Alive || v.Draining || v.Corrupt != "" || v.Addr == "" || (verify && !v.Verified) {
			continue
		}
		w := v.Weight
		if w <= 0 {
			w = 1
		}
		out = append(out, member{Name: v.Node, Addr: v.Addr, Weight: w})
	}
	return out
}

// preferred is the member cell belongs on: weighted rendezvous (highest
// random weight) hashing, so that every node computes the same answer from
// the same live set, and a join or a death moves only the cells that the
// joining or dying node wins or held (about 1/n of them), never a
// reshuffle. ok is false when members is empty.
//
// Each member scores w / −ln(u), where u in (0,1) is a hash of (node,
// cell): the weighted variant of rendezvous hashing, under which a member
// wins a share of cells proportional to its weight.
func preferred(cell string, members []member) (m member, ok bool) {
	best := math.Inf(-1)
	for _, c := range members {
		s := c.Weight / -math.Log(unitHash(c.Name, cell))
		// Ties (vanishingly rare) go to the smaller name, so the answer
		// does not depend on the order of members.
		if s > best || (s == best && c.Name < m.Name) {
			best, m, ok = s, c, true
		}
	}
	return m, ok
}

// unitHash maps (node, cell) to a number strictly between 0 and 1, the same
// in every process (hash/maphash is seeded per process, so it would not do).
func unitHash(node, cell string) float64 {
	h := fnv.New64a()
	h.Write([]byte(node))
	h.Write([]byte{0})
	h.Write([]byte(cell))
	x := h.Sum64()
	// splitmix64's finalizer: FNV alone leaves the high bits of similar
	// names correlated.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return (float64(x>>11) + 0.5) / (1 << 53)
}
