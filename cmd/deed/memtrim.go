package main

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Returning memory to the OS when the daemon goes idle.
//
// With the runtime's default GOGC=100 the heap may grow to twice what is
// live before a collection, and the runtime keeps about that much resident
// afterwards: a daemon that claimed 50,000 cells in a burst and then sat
// idle held ~2.2 KB RSS per cell for ~1 KB of live state, the rest garbage
// of the burst (request and response buffers, claim and log-open
// scratch) that it had freed but not given back. An idle daemon allocates
// next to nothing, so no collection comes to shrink it either. trimWhenIdle
// watches the bytes allocated per interval and, the first interval after
// activity in which they stay under idleAllocBytes, collects and returns
// the free memory to the OS once (debug.FreeOSMemory): one full collection
// per burst, none while busy or while it stays idle.

const (
	trimEvery      = 5 * time.Second
	idleAllocBytes = 1 << 20 // allocated in one trimEvery: idle below this
)

// trimmer decides when to return memory: once per idle period that
// follows an interval of activity.
type trimmer struct {
	last    uint64 // the allocation counter at the previous tick
	pending bool   // activity since the last trim
}

// tick takes the allocation counter now and says whether to trim.
func (t *trimmer) tick(allocated uint64) bool {
	delta := allocated - t.last
	t.last = allocated
	if delta >= idleAllocBytes {
		t.pending = true
		return false
	}
	if !t.pending {
		return false
	}
	t.pending = false
	return true
}

// trimWhenIdle runs until ctx ends, calling trim (debug.FreeOSMemory in the
// daemon) once each time the process goes idle after activity; allocated
// reads the bytes allocated since the process started.
func trimWhenIdle(ctx context.Context, every time.Duration, allocated func() uint64, trim func()) {
	t := &trimmer{last: allocated(), pending: true}
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			if t.tick(allocated()) {
				trim()
			}
		}
	}
}

// heapAllocated is the bytes the process has allocated on the heap so far
// (a counter; reading it does not stop the world).
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// startIdleTrim starts trimWhenIdle for the daemon's process.
func startIdleTrim(ctx context.Context) {
	go trimWhenIdle(ctx, trimEvery, heapAllocated, debug.FreeOSMemory)
}
