//go:build !deedbroken

package owner

import "time"

// Deliberately broken liveness rules. They exist only so that the
// simulation (replication/simulation) can prove that its checkers catch
// them. In every build without the deedbroken tag each switch is a false
// constant: every `if brokenX {…}` is dead code the compiler drops, and the
// functions below, which only such blocks call, are never reached. A test
// build with the deedbroken tag gets the same names as variables, their
// setters and the rules' real code (broken_deedbroken.go).
const (
	// brokenWallClockDeath: a claimer calls the owner's node dead when the
	// at_ms written in its lease, plus the TTL and margin, is older than
	// the claimer's own wall clock. That compares two machines' clocks,
	// which the liveness rule must never do: a node whose clock runs
	// behind looks dead while it still acts as owner.
	brokenWallClockDeath = false

	// brokenIncarnationBlind: a view that proves some incarnation of the
	// owner's node dead is taken as proof for the record being judged,
	// whichever incarnation wrote it. A node that restarted after the view
	// was taken, and claimed the cell under its new incarnation, then
	// loses the cell while it is alive.
	brokenIncarnationBlind = false
)

// brokenOnly is the panic of the functions below in a release build, where
// nothing calls them.
const brokenOnly = "owner: a deliberately broken rule ran in a build without the deedbroken tag"

func noteAtMS(Observation, int64) { panic(brokenOnly) }

func judgeByWallClock(Observation, time.Time, time.Time) Observation { panic(brokenOnly) }
