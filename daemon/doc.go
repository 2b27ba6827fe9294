// Package daemon is deed's node daemon as a library: one node lease, the
// cells it holds with their open logs, and the HTTP API in front of them
// (`deed run` is a thin wrapper that adds flags, the store, TLS, listeners
// and signals).
//
// Open opens the node lease on a bucket and watches for a fence: a fenced
// node drops every cell and, unless Config.FenceExit, opens a new
// incarnation, which waits out the old one's TTL before it acts. Cells are
// claimed on first use (an append, or an explicit claim) and forgotten when
// their lease ends. Handler serves the API — /healthz, /readyz, /metrics
// and /v1/cells/... — whose wire types and a Go client are in package
// daemon/client. Close drains: every log is sealed and every cell released,
// then the node lease, so peers claim everything at once.
//
// Open does not probe the store; a caller that has not checked the bucket
// against the conditional-write contract runs probe.Run (package
// bucket/probe) first.
package daemon
