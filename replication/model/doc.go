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
// It models the rule the code implements (Current) and the faster rule
// for cold cells (Fast), and deliberately broken variants of the latter,
// each of which the checker must catch. The package has no code outside
// its tests.
package model
