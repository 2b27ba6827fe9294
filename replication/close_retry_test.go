package replication_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// A Close that failed (here: the store answers 503 to the seal) can be
// retried once the store is back, and seals then; appends stay refused in
// between. It used to remember the first failure for good, so a release
// that met a brownout could never complete and the cell stayed stuck.
func TestCloseCanBeRetriedAfterAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		l := claim(t, m, "a", false)
		lg, err := replication.Open(t.Context(), m, l)
		if err != nil {
			t.Fatal(err)
		}
		g := newLedger()
		appendN(t, g, lg, l, "a", 2)
		seal := replication.SlotKey(cell, 1, 3)
		remove := m.Inject(fakes3.Rule{Op: fakes3.OpPut, Key: seal, Fault: fakes3.SlowDown})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = lg.Close(ctx) // the seal is retried until the deadline
		cancel()
		if err == nil {
			t.Fatal("Close succeeded although the seal was refused")
		}
		_, err = lg.Append(t.Context(), l, []byte("between"))
		mustCode(t, err, errcode.CodeBadRequest)
		remove()
		if err := lg.Close(t.Context()); err != nil {
			t.Fatalf("retried Close: %v", err)
		}
		if _, ok := m.Bytes(seal); !ok {
			t.Fatal("the retried Close did not seal")
		}
		if err := lg.Close(t.Context()); err != nil {
			t.Fatalf("Close after a successful Close: %v", err)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		g.check(t, m)
	})
}

// A Close whose deadline cut off an append with its PUT in flight, and
// whose outcome stayed unknown, used to give up ("cannot seal") for good.
// Retried, it finds the write that did land in its next slot and seals
// right after it: the record reported unknown is in the log once, and the
// chain is sealed.
func TestCloseSealsAfterAWriteWhoseOutcomeWasUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		l := claim(t, m, "a", false)
		lg, err := replication.Open(t.Context(), m, l)
		if err != nil {
			t.Fatal(err)
		}
		g := newLedger()
		appendN(t, g, lg, l, "a", 1)
		slot := replication.SlotKey(cell, 1, 2)
		// The next write lands but its answer is lost, and the slot cannot
		// be read back: its outcome stays unknown while the store is sick.
		m.Inject(fakes3.Rule{Op: fakes3.OpPut, Key: slot, Fault: fakes3.ErrAfter, Times: 1})
		removeGets := m.Inject(fakes3.Rule{Op: fakes3.OpGet, Key: slot, Fault: fakes3.ErrBefore})
		done := make(chan error, 1)
		go func() { done <- g.append(context.Background(), lg, l, "maybe") }()
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = lg.Close(ctx)
		cancel()
		if err == nil {
			t.Fatal("Close succeeded while the outcome of a write was unknown")
		}
		mustCode(t, <-done, errcode.CodeAmbiguous)

		removeGets()
		if err := lg.Close(t.Context()); err != nil {
			t.Fatalf("retried Close: %v", err)
		}
		if _, ok := m.Bytes(replication.SlotKey(cell, 1, 3)); !ok {
			t.Fatal("the seal is not right after the write that landed")
		}
		recs := g.check(t, m)
		if got := data(recs); !slices.Equal(got, []string{"a0", "maybe"}) {
			t.Fatalf("log %q, want [a0 maybe]", got)
		}
	})
}
