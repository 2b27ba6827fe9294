package daemon

import (
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

// A fenced daemon drops every cell at once, refuses work with DEED-E025,
// and wins its node lease back (as a new incarnation) once the store heals.
func TestDaemonFenceDropsCellsAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		const ttl = 2 * time.Second
		d, err := Open(t.Context(), Config{Node: "a", TTL: ttl}, m.Client("a"), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer closeOK(t, d)
		c, err := d.acquire(t.Context(), "c", false)
		if err != nil {
			t.Fatal(err)
		}
		lease := c.lease
		if _, err := c.log.Append(t.Context(), lease, []byte("x")); err != nil {
			t.Fatal(err)
		}
		m.Partition("a", true)
		time.Sleep(ttl) // past TTL−margin: the node has fenced
		synctest.Wait()
		if d.ready() || d.held("c") != nil {
			t.Fatal("a fenced daemon still reports ready or holds cells")
		}
		if _, err := d.acquire(t.Context(), "c", false); errcode.CodeOf(err) != errcode.CodeNodeFenced {
			t.Fatalf("claim while fenced: %v, want DEED-E025", err)
		}
		if err := lease.Err(); errcode.CodeOf(err) != errcode.CodeNodeFenced {
			t.Fatalf("lease after fence: %v", err)
		}
		m.Partition("a", false)
		healed := time.Now()
		for !d.ready() {
			if time.Since(healed) > 4*ttl {
				t.Fatal("daemon did not regain its node lease after the store healed")
			}
			time.Sleep(50 * time.Millisecond)
		}
		// The new incarnation had to watch the old lease for TTL+margin first.
		if took := time.Since(healed); took < ttl {
			t.Fatalf("regained the node lease %v after healing, before the old one could be dead", took)
		}
		c2, err := d.acquire(t.Context(), "c", false)
		if err != nil || c2.lease.Epoch() != 2 {
			t.Fatalf("re-claim after recovery: %v", err)
		}
		recs, err := c2.log.Read(t.Context(), 0, 10, true)
		if err != nil || len(recs) != 1 || string(recs[0].Data) != "x" {
			t.Fatalf("records after recovery: %v %v", recs, err)
		}
	})
}
