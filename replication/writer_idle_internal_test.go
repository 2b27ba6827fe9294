package replication

import (
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// An idle log keeps no writer state: the writer's queue, context and
// channels exist only while its goroutine runs, and the Close bookkeeping
// only once a Close begins, so the Log a daemon keeps per held cell stays
// small (it holds tens of thousands), its store inline included.
func TestIdleLogKeepsNoWriterState(t *testing.T) {
	// 168: the timestamp floor (8 bytes) is every log's; the Close
	// bookkeeping and the idempotency window share one pointer.
	if size := unsafe.Sizeof(Log{}); size > 168 {
		t.Errorf("Log is %d bytes, want at most 168 with its store inline (the writer's state belongs to a running writer, the closer's to a Close, the key window's to a keyed append)", size)
	}
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		n, err := owner.NewNode(m, owner.Config{Name: "a"})
		if err != nil {
			t.Fatal(err)
		}
		lease, err := n.Claim(t.Context(), "c", owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lg, err := Open(t.Context(), m, lease)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := lg.Append(t.Context(), lease, []byte("x")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * writerLinger) // the writer lingers, then exits
			synctest.Wait()
			lg.mu.Lock()
			w := lg.w
			lg.mu.Unlock()
			if w != nil {
				t.Fatal("an idle log keeps its writer's state")
			}
		}
		if err := lg.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}
