package owner_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/deedkit/deed/bucket"
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
			if err := <-got; bucket.CodeOf(err) != bucket.CodeReleased {
				t.Fatalf("AfterEnd saw %v, want %s", err, bucket.CodeReleased)
			}
		}
		l.AfterEnd(func() { got <- l.Err() }) // already ended: runs at once
		if err := <-got; bucket.CodeOf(err) != bucket.CodeReleased {
			t.Fatalf("late AfterEnd saw %v", err)
		}
		var zero owner.Lease
		ran := make(chan struct{})
		zero.AfterEnd(func() { close(ran) })
		<-ran
	})
}
