package replication_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// Abandon sends nothing, refuses later appends and makes Close a no-op that
// does not seal; the next owner seals the chain end itself, and nothing
// acknowledged is lost.
func TestAbandonSendsNothingAndTheNextOwnerSeals(t *testing.T) {
	m := fakes3.NewMem()
	l1 := claim(t, m, "a", false)
	lg1, err := replication.Open(t.Context(), m, l1)
	if err != nil {
		t.Fatal(err)
	}
	g := newLedger()
	appendN(t, g, lg1, l1, "a", 3)

	before := m.Counts()
	lg1.Abandon()
	if got := m.Counts(); got != before {
		t.Fatalf("Abandon sent requests: %+v, then %+v", before, got)
	}
	_, err = lg1.Append(t.Context(), l1, []byte("late"))
	mustCode(t, err, errcode.CodeBadRequest)
	mustCode(t, lg1.Close(t.Context()), errcode.CodeBadRequest)
	if got := m.Counts(); got != before {
		t.Fatalf("Close after Abandon sent requests: %+v, then %+v", before, got)
	}
	if keys := m.Keys(replication.SlotKey(cell, 1, 4)); len(keys) != 0 {
		t.Fatalf("an abandoned log was sealed: %v", keys)
	}
	lg1.Abandon() // twice is harmless

	l2 := claim(t, m, "b", true)
	lg2 := open(t, m, l2)
	appendN(t, g, lg2, l2, "b", 2)
	g.check(t, m)
	if _, ok := m.Bytes(replication.SlotKey(cell, 1, 4)); !ok {
		t.Fatal("the next owner did not seal the abandoned chain's end")
	}
}

// A fenced owner whose store hangs: Abandon returns at once, the append in
// flight reports an unknown outcome and the queued one the lease's error,
// and a Close that was stuck on its seal returns too.
func TestAbandonCutsOffWritesAndCloseInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		l := claim(t, m, "a", false)
		lg, err := replication.Open(t.Context(), m, l)
		if err != nil {
			t.Fatal(err)
		}
		m.Inject(fakes3.Rule{Op: fakes3.OpPut, Latency: time.Hour}) // the store stops answering
		type res struct {
			err error
		}
		results := make(chan res, 2)
		go func() {
			_, err := lg.Append(context.Background(), l, []byte("in-flight"))
			results <- res{err}
		}()
		synctest.Wait() // its PUT is in flight
		go func() {
			_, err := lg.Append(context.Background(), l, []byte("queued"))
			results <- res{err}
		}()
		closed := make(chan error, 1)
		go func() { closed <- lg.Close(context.Background()) }()
		synctest.Wait()

		start := time.Now()
		lg.Abandon()
		if d := time.Since(start); d != 0 {
			t.Fatalf("Abandon took %v of a hung store's time", d)
		}
		codes := map[errcode.Code]int{}
		for range 2 {
			r := <-results
			codes[errcode.CodeOf(r.err)]++
		}
		if codes[errcode.CodeAmbiguous] != 1 || len(codes) != 2 {
			t.Fatalf("append outcomes by code %v, want one unknown (E012) and one refused", codes)
		}
		if err := <-closed; err == nil {
			t.Fatal("a Close cut short by Abandon reported success")
		}
		if time.Since(start) != 0 {
			t.Fatal("appends and Close waited for the hung store")
		}
	})
}
