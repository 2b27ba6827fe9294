package daemon

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// Appends that run while the cell is released again and again are never
// refused because of it: each waits for the release, or finds its log
// closing and is tried again on the cell claimed anew, and every one
// acknowledged is in the log afterwards.
func TestAppendsDuringRetireAreRetriedNotRefused(t *testing.T) {
	b := fakes3.NewMem()
	d := openTestDaemon(t, b, 3*time.Second)
	h := d.Handler()
	// Writers go on until the cell has been released a few times under
	// them (bounded, so a broken retire cannot hang the test).
	const writers, minEach, maxEach, wantReleases = 4, 10, 2000, 5
	var released atomic.Int64
	var wg sync.WaitGroup
	answers := make(chan appendAnswer, writers*maxEach)
	stop := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			for i := 0; i < maxEach && (i < minEach || released.Load() < wantReleases); i++ {
				answers <- serveAppend(t, h, "c", fmt.Sprintf("w%d-%d", w, i))
			}
		})
	}
	var rwg sync.WaitGroup
	rwg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := d.retire(t.Context(), "c", "test"); err == nil {
				released.Add(1)
			}
			time.Sleep(time.Millisecond)
		}
	})
	wg.Wait()
	close(stop)
	rwg.Wait()
	close(answers)
	acked := map[string]bool{}
	for a := range answers {
		if a.Status != 200 {
			t.Errorf("append %s answered %d %s (applied %q): a retire must not refuse it", a.Data, a.Status, a.Code, a.Applied)
			continue
		}
		acked[a.Data] = true
	}
	if released.Load() == 0 {
		t.Fatal("the cell was never released during the appends: the test proved nothing")
	}
	n := len(acked)
	requireInLog(t, b, "c", acked)
	t.Logf("%d releases during %d acknowledged appends", released.Load(), n)
}

// requireInLog fails t unless every record in acked is in cell's log,
// read page by page from the bucket.
func requireInLog(t *testing.T, b bucket.Bucket, cell string, acked map[string]bool) {
	t.Helper()
	missing := maps.Clone(acked)
	for after := replication.Pos(0); ; {
		recs, err := replication.Read(context.Background(), b, cell, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			delete(missing, string(r.Data))
		}
		after = recs[len(recs)-1].Pos
	}
	if len(missing) > 0 {
		t.Fatalf("acknowledged appends missing from the log of %s: %v", cell, missing)
	}
}
