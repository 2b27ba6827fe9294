// Package model is an exhaustive model of how a cell changes owners: the
// claims on own.json, the announcements, the re-check, the LIST, the
// fencing walk's seals and tombstones, record writes and releases, by two
// or three data owners and a lock-only claimer, any of which can crash
// (or lose the answer to its last write) after any request. Its tests
// explore every interleaving on a small bound and check the promises of
// docs/design.md in every state reached: every acknowledged record is on
// the chain a restore reads now, and no two acknowledged records hold one
// position (a stale owner acknowledged).
//
// It models the rule before the shortcuts for cold cells (Current), the
// first of them (Fast: epoch 1 opens without a request, a release names its
// chain end), the rule the code implements (Cold: Fast, and a claim that
// takes a release's end announces its epoch in own.json instead of a marker,
// skips the re-check, trusts the end of the node's own release and reads
// the seal of another's concurrently with the claim), and deliberately
// broken variants of the latter two, each of which the checker must catch.
// The package has no code outside its tests.
package model
