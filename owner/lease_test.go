package owner_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// AfterEnd runs its function once the lease ends, whatever ends it, and at
// once for a lease that has already ended or was never minted.
func TestAfterEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := fakes3.NewMem()
		n, err := owner.NewNode(m, owner.Config{Name: "a"})
		if err != nil {
			t.Fatal(err)
		}
		l, err := n.Claim(ctx, "c", owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 3)
		l.AfterEnd(func() { got <- l.Err() })
		l.AfterEnd(func() { got <- l.Err() })
		synctest.Wait()
		if len(got) != 0 {
			t.Fatal("AfterEnd ran before the lease ended")
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := <-got; errcode.CodeOf(err) != errcode.CodeReleased {
				t.Fatalf("AfterEnd saw %v, want %s", err, errcode.CodeReleased)
			}
		}
		l.AfterEnd(func() { got <- l.Err() }) // already ended: runs at once
		if err := <-got; errcode.CodeOf(err) != errcode.CodeReleased {
			t.Fatalf("late AfterEnd saw %v", err)
		}
		var zero owner.Lease
		ran := make(chan struct{})
		zero.AfterEnd(func() { close(ran) })
		<-ran
	})
}

// FenceDeadline is TTL−margin after the send time of the last node-lease
// write that succeeded: it moves with each renewal, and not while
// renewals fail, so a watchdog fed with it (deed exec's guard) stops work
// when the node does.
func TestNodeFenceDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		n := newNode(t, m, "a")
		if !n.FenceDeadline().IsZero() {
			t.Fatalf("before Open: %v", n.FenceDeadline())
		}
		opened := time.Now()
		if err := n.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeNode(n) })
		if got, want := n.FenceDeadline(), opened.Add(ttl-margin); !got.Equal(want) {
			t.Fatalf("after Open: %v, want %v", got, want)
		}
		time.Sleep(ttl/3 + time.Millisecond) // one renewal
		synctest.Wait()
		renewed := n.FenceDeadline()
		if want := opened.Add(ttl/3 + ttl - margin); !renewed.Equal(want) {
			t.Fatalf("after a renewal: %v, want %v", renewed, want)
		}
		// Renewals fail: the deadline stays, and the node fences at it.
		m.Inject(fakes3.Rule{Op: fakes3.OpPut, KeyPrefix: owner.NodesPrefix, Fault: fakes3.ErrBefore})
		time.Sleep(renewed.Sub(time.Now()) - time.Millisecond)
		if !n.FenceDeadline().Equal(renewed) {
			t.Fatalf("moved without a renewal: %v", n.FenceDeadline())
		}
		select {
		case <-n.Done():
			t.Fatal("fenced before its deadline")
		default:
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if errcode.CodeOf(n.Err()) != errcode.CodeNodeFenced {
			t.Fatalf("after the deadline: %v", n.Err())
		}
	})
}
