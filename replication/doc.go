// Package replication is deed's data path: each cell's durable, ordered
// log in the bucket, fenced by epochs so that a stale owner learns it lost
// the cell at its next write, and no acknowledged record is ever lost,
// whatever the clocks do.
//
// # Layout
//
// A cell's log lives under cells/<cell>/ltx/. Every claim of the cell bumps
// its epoch (package owner), and the owner of epoch E writes only under
// e<E>/:
//
//	cells/<cell>/ltx/e<epoch>/<txid:016x>.ltx       a transaction file (slot)
//	cells/<cell>/ltx/e<epoch>/<txid:016x>.snapshot  a snapshot
//	cells/<cell>/ltx/announce/<epoch:020d>          epoch's announcement
//
// A txid is a slot number, global to the cell and never reused: epoch E+1
// continues where epoch E's chain ended. Every slot is written create-only
// (If-None-Match: *), so at most one file ever occupies it.
//
// # Transaction files
//
// "ltx" means log transaction; this is deed's own framed format, not
// Litestream's. A file is a 40-byte header, the writer's token, a payload
// and a CRC-32C (Castagnoli) of everything before it; integers are
// big-endian (see Encode for the byte layout):
//
//	magic "DLTX" | version 1 | kind | token length | epoch | txid | pos |
//	record count | payload length | token | payload | crc32c
//
// Version 2 (written since records carry a timestamp) is the same frame; a
// records payload starts with the owner's timestamp and the idempotency
// keys of the appends in it, and a seal or tombstone ends with the newest
// timestamp its writer had fenced. A file with neither is still written as
// version 1, and version-1 files decode as they always did (timestamp 0,
// no keys).
//
// The kind is records (a group commit of one or more records, each a
// uvarint length and its bytes), seal, tombstone, or snapshot. The epoch and
// txid repeat the file's key and are checked against it. The token is the
// writer's incarnation: the claim nonce of its lease (owner.Lease.Token).
// A seal or tombstone carries the epoch that wrote it, for diagnosis only.
// A file that is truncated, fails its checksum or names another slot is
// DEED-E031, and the message names its key; reads stop there with that
// error, they never skip it.
//
// # Positions
//
// Every record has a position: its index in the cell's whole log, starting
// at 1. Each records file carries the position of its first record, so a
// record's position is stable across group commits, epochs, restores and
// GC, and a reader can resume "after position p" from any process. A
// snapshot carries the position of the first record after it.
//
// # Appending
//
// The owner of epoch E writes slot T by creating e<E>/<T>.ltx. Records that
// arrive while one PUT is in flight wait and go together in the next file
// (bounded by WithMaxBatch); there is one PUT in flight per cell and slots
// are written strictly in order. An append returns only when its file, and
// every slot before it, is in the bucket.
//
// A 412 on its own slot means someone else's file is there: a seal or
// tombstone means a newer epoch fenced this one, so the append, and every
// one queued behind it, fails with DEED-E021 and the lease ends; our own
// bytes mean an earlier attempt landed after all. Any other failure of the
// PUT (timeout, 5xx, 409, a hung connection) is ambiguous and is resolved
// by reading the slot back, never by guessing: our bytes → landed; a seal
// → fenced; missing → write the same bytes again, with backoff, until the
// outcome is known. A slot is never skipped.
//
// # Sealing predecessors
//
// Before its first write, a new owner E fences every older epoch that could
// still write, at a cost independent of how many epochs lie between (each
// lock-only claim, such as deed exec, bumps one and writes nothing here):
//
//  1. it announces E by creating cells/<cell>/ltx/announce/<E:020d>
//     (create-only; an ambiguous PUT is resolved before it goes on);
//  2. it reads own.json again: an epoch above E means E is fenced, and it
//     writes nothing;
//  3. it LISTs ltx/: the announced epochs (those with a marker, and, for
//     buckets written before markers, those holding any file, and epoch 1
//     always) and where the newest records are;
//  4. it finds D, the newest epoch below E with data, walks D's chain to
//     its end slot T (its first missing txid), creates a seal at e<D>/<T>,
//     and a tombstone at e<X>/<T> for every announced epoch of that LIST
//     with D < X < E. On a 412 at any of these slots it reads what is
//     there: a record means that epoch has data (it becomes the new D: walk
//     it to its end, seal it, tombstone the announced epochs above at the
//     new T); a seal or tombstone by someone else is accepted as the end;
//  5. its own chain starts at T.
//
// Epoch 1, whose claim created own.json, has no predecessor: its first Open
// skips all of this and writes slot 1 at once. Since every LIST counts it
// announced, a successor's walk tombstones its slot 1 unless its record is
// there first, so the create-only PUT of that slot is epoch 1's fence.
//
// An epoch E whose claim took its predecessor's released end (a release
// naming where its log sealed the chain) announces itself in that claim
// record instead ("announces": E in own.json, carried on by every later
// write of it until a release that names its end): its Open skips steps
// 1–2, and every later claimer's walk counts E announced. It starts at the
// named seal, which its claim read with its PUT (not at all when the
// release was its own node's and its log saw the seal land); if the slot
// holds no such seal it walks (steps 3–5).
//
// Any other epoch that never announces never writes. One that announces after
// E's LIST announced after E's claim, so its re-check (step 2) sees E and
// it never writes either. So every epoch that can still write at T is in
// E's LIST, and gets a tombstone there or shows its record.
//
// A stale owner's next write lands on that seal or tombstone and fails.
// Nothing it wrote after the seal is reachable; nothing it wrote before is
// lost. Close seals the log's own end, so that after the release the next
// claimer finds the seal and writes nothing to fence.
//
// Only keys in the canonical form are read (the epoch in decimal without
// leading zeros, the txid in 16 lower-case hex digits, both ≥ 1; markers
// with 20 digits): anything else under ltx/ is a stranger that every walk
// ignores, GC keeps, and a GC dry run reports.
//
// # Restore rule
//
// Start at the newest snapshot's next slot (or at a virtual seal at slot 1
// of epoch 0) and read slots in order.
//
//   - A record continues at the next slot of the same epoch.
//   - A seal or tombstone in epoch X at slot T continues at slot T of the
//     first announced epoch above X that holds a record there, skipping
//     seals, tombstones and missing slots alike (an epoch may announce,
//     lose its re-check and never write). The announced epochs come from a
//     LIST made during the read, never from one made before it began.
//   - A missing slot after a record ends the chain, and so does a seal with
//     no announced epoch above it holding a record at its slot.
//
// The epoch named in a seal is never followed: two claimers can race on one
// tombstone, so the epoch it names may start later than T. The rule is
// sound because each owner's records occupy one slot range, the ranges are
// disjoint and increase with the epoch, and an owner writes slot T only
// after every lower epoch that could write T holds a seal, a tombstone or a
// record there. The tests check that the broken variants (follow the
// seal's epoch; no tombstones; no re-check; re-check first; a LIST from
// before the claim or the read; stop at the first missing slot) lose
// acknowledged records.
//
// Log.Read with barrier is linearizable: one HEAD of the owner's next slot
// still missing proves no successor has fenced it, hence none has written.
//
// # Snapshots and GC
//
// Log.Snapshot writes application state covering every txid ≤ upTo.
// Restore reads the newest snapshot and only the files after it. GC deletes
// what the newest snapshot makes redundant — older snapshots, and record
// files at or below its txid in sealed epochs — and never a seal, a
// tombstone or an announcement: they keep a paused owner fenced forever. A walk that meets a
// hole GC made (it deletes older snapshots first, then records in txid
// order) finds its own starting file gone too, and starts again rather than
// seal the hole. Positions GC deleted are reported as ErrCompacted.
//
// # Errors
//
// Every error a caller sees carries a DEED code first in its message:
// E021 fenced, E022 lease released, E023 zero lease, E024 another lease,
// E031 damaged file, E012 an outcome that could not be learned (the record
// may still become durable), E011 the store unavailable, E040 a bad
// request (a closed log, a snapshot of a txid not yet durable, compacted
// positions).
package replication
