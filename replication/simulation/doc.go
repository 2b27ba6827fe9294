// Package simulation holds deed's adversary: a seeded multi-node
// simulation of owner.Node and replication.Log sharing one in-memory bucket
// (fakes3.Mem), a history recorder, and checkers for the promises of
// docs/design.md. It is test-only: everything lives in _test.go files.
//
// Each seed draws a schedule — client operations (append, read with and
// without a barrier, claim, forced claim, release, snapshot, GC), handoffs
// as the daemon makes them (moves, drains, idle releases: seal, then
// release; see handoff_test.go) and faults (latency, errors before and
// after apply, lost responses, 409, 503, hung and late-landing requests,
// partitions, paused and crashed nodes, wall clocks jumping by hours) —
// and plays it in a testing/synctest bubble, so
// virtual time makes a run of a minute take milliseconds. Snapshots and GC
// runs come from a random stream of their own, merged into the schedule by
// time, so adding them changed no other draw of any seed (handoffs and
// lock-only claims have streams of their own too). The checkers
// then judge the history: porcupine for linearizability of each cell's
// log, and direct invariants for the rest. A snapshot's state is the log
// up to it, so after GC the final restore (the newest snapshot, then the
// records after it) is still the whole log, and a read that finds its
// start compacted reads on from the snapshot (compact_test.go).
//
//	go test ./replication/simulation                        # 200 seeds
//	go test ./replication/simulation -seeds 1000            # more
//	go test ./replication/simulation -run 'TestSimulation$' -seed 17 -v
//	go test ./replication/simulation -handoffs=false        # the schedules from before the handoffs
//	go test ./replication/simulation -releasefirst          # handoffs release, then seal
//
// A failing seed prints the command that replays it. Replaying repeats the
// schedule exactly (it is a pure function of the seed); the interleaving of
// goroutines inside the bubble is the Go scheduler's and may differ, so a
// replay usually, not always, repeats the failure. See docs/guarantees.md,
// "Replaying a seed".
package simulation
