// Package owner decides who owns a cell, using nothing but conditional
// writes to one object per cell.
//
// # Ownership records
//
// A cell's owner is recorded in cells/<cell>/own.json:
//
//	{"node":"a","epoch":7,"nonce":"…","at_ms":…}
//
// node "" means released. Every claim writes a new epoch; the data path
// (package replication) writes the cell's data under ltx/e<epoch>/ and seals
// older epochs before its first write, so an owner that was replaced cannot
// add anything a reader will see. The record says who should write; the
// layout guarantees that only one epoch's writes count.
//
// # Claiming
//
// Claim reads own.json and decides, with the pure function Decide:
//
//   - absent: create {me, epoch 1} with If-None-Match: *.
//   - released, or naming this node (a restart of the same node id): take it
//     over with If-Match and epoch+1. Re-entry fences the previous
//     incarnation, because its epoch is now old.
//   - naming another node: take over only if that node is dead, or when the
//     operator forces it; otherwise refuse with DEED-E020, naming the owner
//     and its advertised address.
//
// A 412 means the record changed between read and write: decide again. A
// 409 means a concurrent conditional write was in flight: back off first.
// Anything else is ambiguous — the write may have landed — so the record is
// read back and the claim counts as applied only if it carries our nonce.
// Every body carries a fresh nonce, so two writes never have the same ETag.
//
// Before reading, an unforced claim may send the write it can guess (Guess):
// the create for a cell the node knows nothing about, or If-Match with
// epoch+1 on the ETag that the node's own release of the cell produced. Each
// is what Decide would choose if the record is as guessed, and its condition
// refuses it otherwise, so a claim of such a cell costs one round trip; a
// refused guess costs one more, then the claim reads and decides as above.
//
// # Node liveness without comparing clocks
//
// A running node holds nodes/<node>.json and renews it every TTL/3 with
// If-Match. If no renewal succeeded within TTL−margin of the send time of
// the last good one, the node fences itself: every Lease it holds ends with
// DEED-E025. A 412 on renewal (another process replaced the lease) fences
// at once.
//
// Peers never read the writer's timestamp. An Observer records the ETag of
// each node lease and the local monotonic time it first saw it; a node is
// dead when its lease is missing, released, or unchanged for longer than
// TTL+margin of the observer's own time. Since the observer's first sight
// of an ETag is never before the renewal that wrote it was sent, the node
// has always fenced itself (at send+TTL−margin) before any observer may call
// it dead (at first-sight+TTL+margin), whatever the wall clocks say. (The
// first sight is the arrival of the first answer showing the version, never
// that request's send time: the renewal may have landed while it was in
// flight.) One LIST of nodes/ per TTL/3 refreshes every observation, so the
// steady-state cost grows with nodes, not cells. Death counts from the
// first sight of the last version, which that LIST would see up to TTL/3
// late, so an opened node also reads a peer's lease when it is due a new
// version, every TTL/20 until it changes, and at the moment a read can
// prove the peer dead (Observer.watchPlan): a peer is then declared dead
// about TTL+margin+TTL/20 after its last renewal, for one or two reads per
// renewal.
//
// A view up to TTL/3 old may say a node is alive; to say it is dead, a
// claimer needs a proof about the incarnation that wrote the record (the
// record's "inc"): its lease released, or a read sent more than TTL+margin
// after the version it showed was first seen (IncarnationDead). An
// incarnation never comes back, so such a proof may be old and the takeover
// costs no more than a claim of a released cell. Without one, the owner's
// lease is read again after the record, because the node may have
// restarted and claimed the cell since the view was taken.
//
// # The Lease
//
// Only a successful claim mints a *Lease. Data-path calls take it as an
// argument and refuse a zero, released, superseded or fenced one; Done
// closes and Err says why (DEED-E022 released, DEED-E021 superseded,
// DEED-E025 node fenced). A lease learns it was superseded either on the
// data path (the epoch fence refuses its write) or, on an opened node, from
// the node's watch, which re-reads the record of each held cell every TTL/3
// (Config.WatchInterval): a holder that writes nothing still sees Done
// close when another node takes its cell. With claims, runs a function and
// always releases.
//
// Clocks decide only when a peer may take over; safety rests on the
// conditional writes and the seals, so a paused process or a skewed clock
// can cost availability but never a promise.
package owner
