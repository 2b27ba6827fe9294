//go:build deedbroken

package owner

import (
	"sync"
	"testing"
	"time"
)

// A deedbroken build carries switches that break the protocol: it refuses
// to run outside a test binary, so that it can never be shipped or run as
// deed (make release-check also rejects any build tag).
func init() {
	if !testing.Testing() {
		panic("owner: built with the deedbroken tag, which exists only for the broken-variant tests (go test -tags deedbroken): never run or ship such a build")
	}
}

// The switches broken.go documents, as variables the setters below flip.
var (
	brokenWallClockDeath   bool
	brokenIncarnationBlind bool
)

// SetBrokenWallClockDeath switches the broken liveness rule of broken.go on
// or off and returns a function that restores the previous setting. It
// exists only in builds with the deedbroken tag, for the simulation's
// tests that its checkers catch the rule; never call it while nodes run.
func SetBrokenWallClockDeath(on bool) (restore func()) {
	old := brokenWallClockDeath
	brokenWallClockDeath = on
	return func() {
		brokenWallClockDeath = old
		atMSMu.Lock()
		clear(atMSOf)
		atMSMu.Unlock()
	}
}

// SetBrokenIncarnationBlind switches the broken takeover rule of broken.go
// on or off and returns a function that restores the previous setting.
func SetBrokenIncarnationBlind(on bool) (restore func()) {
	old := brokenIncarnationBlind
	brokenIncarnationBlind = on
	return func() { brokenIncarnationBlind = old }
}

// atMSOf keeps the at_ms of every node lease version an observer read
// while brokenWallClockDeath is on, for judgeByWallClock: the sound rules
// never read at_ms, so Observation does not carry it. A version is named
// by node, incarnation and ETag, which no other lease version shares, even
// across the stores of tests that run in parallel.
var (
	atMSMu sync.Mutex
	atMSOf = map[string]int64{}
)

func versionKey(ob Observation) string { return ob.Node + "\x00" + ob.Incarnation + "\x00" + ob.ETag }

// noteAtMS records at, the at_ms of the lease version ob shows.
func noteAtMS(ob Observation, at int64) {
	atMSMu.Lock()
	atMSOf[versionKey(ob)] = at
	atMSMu.Unlock()
}

// judgeByWallClock rewrites the observation so that Alive, judged at now,
// applies the broken rule: the lease counts as unchanged since the wall
// time it was stamped with, as read on this node's wall clock.
func judgeByWallClock(ob Observation, now, wall time.Time) Observation {
	if !ob.Exists || ob.Released {
		return ob
	}
	atMSMu.Lock()
	at := atMSOf[versionKey(ob)]
	atMSMu.Unlock()
	ob.FirstSeen = now.Add(-wall.Sub(time.UnixMilli(at)))
	return ob
}
