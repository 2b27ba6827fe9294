package owner

// LeaseSizeForTest is the length of the lease deed writes for r.
func LeaseSizeForTest(r NodeRecord, key []byte) int {
	return len(r.padded(key).sign(key).marshal())
}
