package owner

import "time"

// brokenWallClockDeath switches on a deliberately broken liveness rule: a
// claimer calls the owner's node dead when the at_ms written in its lease,
// plus the TTL and margin, is older than the claimer's own wall clock. That
// compares two machines' clocks, which DESIGN.md forbids: a node whose
// clock runs behind looks dead while it still acts as owner.
//
// It exists only so that the simulation (replication/simulation) can prove
// that its checkers catch the rule. Only a test build with the deedbroken
// tag can set it (broken_deedbroken.go); in every other build it is false
// and at_ms is never read.
var brokenWallClockDeath bool

// brokenIncarnationBlind switches on a deliberately broken takeover rule: a
// view that proves some incarnation of the owner's node dead is taken as
// proof for the record being judged, whichever incarnation wrote it. A node
// that restarted after the view was taken, and claimed the cell under its
// new incarnation, then loses the cell while it is alive. Like the rule
// above it can be set only in a deedbroken build.
var brokenIncarnationBlind bool

// judgeByWallClock rewrites the observation so that Alive, judged at now,
// applies the broken rule: the lease counts as unchanged since the wall
// time it was stamped with, as read on this node's wall clock.
func judgeByWallClock(ob Observation, now, wall time.Time) Observation {
	if !ob.Exists || ob.Released {
		return ob
	}
	ob.FirstSeen = now.Add(-wall.Sub(time.UnixMilli(ob.atMS)))
	return ob
}
