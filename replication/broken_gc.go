package replication

// Deliberately broken GC rules (see broken.go for why such switches exist).
// Only a test build with the deedbroken tag can set them
// (broken_gc_deedbroken.go); in every other build they are false. The
// simulation catches brokenGCMarkers (TestBrokenGCDeletesMarkers); the race
// brokenGCNewestFirst opens needs an interleaving random schedules almost
// never produce, so TestBrokenGCNewestFirstSealsAHole sets it up step by
// step.

// brokenGCNewestFirst: GC deletes what it may delete newest first — the
// record files in descending txid order, then the older snapshots, newest
// first — instead of older snapshots first, then record files in txid
// order. Every file it deletes is still covered by the newest snapshot, so
// the end state is the same; what breaks is the argument that lets walks
// run during GC (stillValid): a walk that meets a hole must find the file
// it started from (a record below the hole, or an older snapshot) gone as
// well. Deleting from the top, GC makes holes above a walk's start while
// the start is still there: a new owner's fencing walk that started below
// the range takes the hole for the end of the chain and seals it — a seal
// in the middle of the chain, which cuts off every record after it — and
// a restore from an older snapshot, or a read whose listing predates the
// snapshot (reads check holes against the snapshot their listing showed,
// anchor.covered), returns the log cut short.
var brokenGCNewestFirst bool

// newestFirst reverses victims (older snapshots, then record files in txid
// order) into the delete order of brokenGCNewestFirst.
func newestFirst(victims []listed) {
	for l, r := 0, len(victims)-1; l < r; l, r = l+1, r-1 {
		victims[l], victims[r] = victims[r], victims[l]
	}
}

// brokenGCMarkers: GC deletes the seals and tombstones at or below the
// snapshot along with the records. Restores do not miss them (they start
// after the snapshot), but a paused or forced-out owner does: the seal at
// its next slot was all that fenced it, so its next append lands in the
// freed slot and is acknowledged — below the snapshot, where no restore
// will ever look.
var brokenGCMarkers bool
