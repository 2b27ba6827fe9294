//go:build deedbroken

package replication_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// The same race with GC deleting newest first: when B meets the hole at
// slot 4, GC has deleted 6, 5 and 4 but not yet 3, B's anchor. B takes the
// hole for the end of A's chain, seals it — a seal in the middle of A's
// chain — and starts its own chain at slot 4, position 4. B's next append
// is acknowledged and lost: a restore starts from A's snapshot at 6, goes
// on past A's own seal at 7, and finds nothing at e2/7.
//
//	go test -tags deedbroken ./replication -run GCNewestFirst -v
func TestBrokenGCNewestFirstSealsAHole(t *testing.T) {
	defer replication.SetBrokenGCNewestFirst(true)()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := fakes3.NewMem()
		logB, lb, _ := gcUnderWalk(t, m)
		defer logB.Close(ctx) // before the bubble ends: no writer may linger
		if h := logB.Start(); h.Next != 4 || h.NextPos != 4 {
			t.Fatalf("B's chain starts at %+v; the broken order should have made B seal the hole at 4", h)
		}
		if _, err := logB.Append(ctx, lb, []byte("b0")); err != nil {
			t.Fatalf("B's append: %v", err)
		}
		var got []string
		if _, err := replication.Restore(ctx, m, cell, nil,
			func(r replication.Record) error { got = append(got, string(r.Data)); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(got) != 0 {
			t.Fatalf("restore %q: B's acknowledged record should be lost under the broken order", got)
		}
	})
}
