package main

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestTrimmerOncePerIdlePeriod: memory is returned once after each burst,
// never while busy, and not again while the process stays idle.
func TestTrimmerOncePerIdlePeriod(t *testing.T) {
	tr := &trimmer{}
	var n uint64
	steps := []struct {
		alloc uint64
		trim  bool
	}{
		{10 << 20, false}, // busy
		{10 << 20, false}, // busy
		{100, true},       // idle after a burst: trim
		{100, false},      // still idle: nothing more
		{0, false},
		{idleAllocBytes, false}, // busy again
		{idleAllocBytes - 1, true},
	}
	for i, s := range steps {
		n += s.alloc
		if got := tr.tick(n); got != s.trim {
			t.Fatalf("step %d (+%d bytes): trim %v, want %v", i, s.alloc, got, s.trim)
		}
	}
}

// TestTrimWhenIdleLoop: the loop trims once when the process that started
// busy goes idle, and stops with its context.
func TestTrimWhenIdleLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var alloc, trims atomic.Uint64
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			trimWhenIdle(ctx, time.Second, alloc.Load, func() { trims.Add(1) })
			close(done)
		}()
		synctest.Wait()     // the loop has read the counter and waits
		alloc.Add(50 << 20) // a burst during the first interval
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if n := trims.Load(); n != 0 {
			t.Fatalf("%d trims while busy, want 0", n)
		}
		time.Sleep(5 * time.Second) // idle
		synctest.Wait()
		if n := trims.Load(); n != 1 {
			t.Fatalf("%d trims after going idle, want 1", n)
		}
		cancel()
		<-done
	})
}
