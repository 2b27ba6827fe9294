//go:build deedbroken

package replication

// SetBrokenGCNewestFirst makes GC delete newest first (record files in
// descending txid order, then older snapshots), so a walk can meet a hole
// while the file it started from is still there (broken_gc.go).
func SetBrokenGCNewestFirst(on bool) (restore func()) { return set(&brokenGCNewestFirst, on) }

// SetBrokenGCMarkers makes GC delete the seals and tombstones its
// snapshot covers (broken_gc.go).
func SetBrokenGCMarkers(on bool) (restore func()) { return set(&brokenGCMarkers, on) }
