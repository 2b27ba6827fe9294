//go:build deedbroken

package replication

// The switches of broken.go, for the simulation's tests that its checkers
// catch each broken rule. They exist only in builds with the deedbroken
// tag. Each returns a function that restores the previous setting; never
// flip one while a log is open.

// SetBrokenNoSeal makes a new owner skip sealing its predecessors.
func SetBrokenNoSeal(on bool) (restore func()) { return set(&brokenNoSeal, on) }

// SetBrokenNoReadBack makes slot writes trust the PUT's typed error instead
// of reading the slot back.
func SetBrokenNoReadBack(on bool) (restore func()) { return set(&brokenNoReadBack, on) }

// SetBrokenEarlyAck makes appends acknowledged before their PUT returns.
func SetBrokenEarlyAck(on bool) (restore func()) { return set(&brokenEarlyAck, on) }

func set(v *bool, on bool) func() {
	old := *v
	*v = on
	return func() { *v = old }
}
