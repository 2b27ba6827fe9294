package replication_test

import (
	"context"
	"testing"

	"github.com/deedkit/deed/fakes3"
)

// Changed is closed by the next commit, not before, and a new channel
// waits for the one after; closing the log wakes its waiters too.
func TestChangedWakesOnCommitAndClose(t *testing.T) {
	m := fakes3.NewMem()
	l := claim(t, m, "a", false)
	lg := open(t, m, l)
	ctx := context.Background()
	ch := lg.Changed()
	if ch != lg.Changed() {
		t.Fatal("two waiters before a commit got different channels")
	}
	select {
	case <-ch:
		t.Fatal("Changed closed before any commit")
	default:
	}
	if _, err := lg.Append(ctx, l, []byte("one")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("Changed not closed by an acknowledged append")
	}
	next := lg.Changed()
	select {
	case <-next:
		t.Fatal("the channel after a commit is already closed")
	default:
	}
	if err := lg.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-next:
	default:
		t.Fatal("Changed not closed by Close")
	}
	select {
	case <-lg.Changed():
	default:
		t.Fatal("Changed of a closed log does not answer at once")
	}
}
