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

// SetBrokenNoRecheck makes a new owner skip re-reading the ownership record
// after its announcement.
func SetBrokenNoRecheck(on bool) (restore func()) { return set(&brokenNoRecheck, on) }

// SetBrokenRecheckFirst makes a new owner re-read the ownership record
// before it announces instead of after.
func SetBrokenRecheckFirst(on bool) (restore func()) { return set(&brokenRecheckFirst, on) }

// SetBrokenListBeforeClaim makes a new owner tombstone the announced epochs
// of a LIST made before its claim.
func SetBrokenListBeforeClaim(on bool) (restore func()) { return set(&brokenListBeforeClaim, on) }

// SetBrokenReaderStaleList makes readers scan the announced epochs of a
// LIST made before their read began.
func SetBrokenReaderStaleList(on bool) (restore func()) { return set(&brokenReaderStaleList, on) }

// SetBrokenReaderStopsAtMissing makes readers end the chain at the first
// missing slot of an announced epoch above a seal.
func SetBrokenReaderStopsAtMissing(on bool) (restore func()) {
	return set(&brokenReaderStopsAtMissing, on)
}

// ForgetStaleLists drops the listings the stale-LIST variants keep.
func ForgetStaleLists() {
	staleMu.Lock()
	clear(staleLists)
	staleMu.Unlock()
}
