package replication

// writerStack is the stack a writer goroutine grows to before its first
// PUT: about what a conditional PutObject through aws-sdk-go-v2 reaches.
const writerStack = 32 << 10

// growStack grows the calling goroutine's stack to writerStack in one step.
//
// A writer goroutine starts (see Log.run) with the runtime's small initial
// stack. Grown step by step inside the SDK's deep call chain, it is copied
// several times, every frame adjusted each time: measured against the
// in-process HTTP fake that cost a fresh writer 30-45 µs per PUT, a third
// of the PUT itself (BenchmarkDaemonOverhead). One large frame taken while
// the stack is still shallow grows it in a single cheap copy. The stack is
// freed when the writer exits, so an idle log still costs nothing. (The
// same trick as CockroachDB's util/growstack.)
//
//go:noinline
func growStack() {
	var buf [writerStack]byte
	useStack(buf[:])
}

// useStack keeps growStack's frame from being optimised away.
//
//go:noinline
func useStack([]byte) {}
