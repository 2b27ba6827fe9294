//go:build deedbroken

package owner

// SetBrokenWallClockDeath switches the broken liveness rule of broken.go on
// or off and returns a function that restores the previous setting. It
// exists only in builds with the deedbroken tag, for the simulation's
// tests that its checkers catch the rule; never call it while nodes run.
func SetBrokenWallClockDeath(on bool) (restore func()) {
	old := brokenWallClockDeath
	brokenWallClockDeath = on
	return func() { brokenWallClockDeath = old }
}

// SetBrokenIncarnationBlind switches the broken takeover rule of broken.go
// on or off and returns a function that restores the previous setting.
func SetBrokenIncarnationBlind(on bool) (restore func()) {
	old := brokenIncarnationBlind
	brokenIncarnationBlind = on
	return func() { brokenIncarnationBlind = old }
}
