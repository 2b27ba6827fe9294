package daemon

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

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
	const writers, each = 4, 25
	var wg sync.WaitGroup
	answers := make(chan appendAnswer, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				answers <- serveAppend(h, "c", fmt.Sprintf("w%d-%d", w, i))
			}
		})
	}
	stop := make(chan struct{})
	released := 0
	var rwg sync.WaitGroup
	rwg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := d.retire(t.Context(), "c", "test"); err == nil {
				released++
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
	if released == 0 {
		t.Fatal("the cell was never released during the appends: the test proved nothing")
	}
	recs, err := replication.Read(context.Background(), b, "c", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		delete(acked, string(r.Data))
	}
	if len(acked) > 0 {
		t.Fatalf("acknowledged appends missing from the log: %v", acked)
	}
	t.Logf("%d releases during %d appends", released, writers*each)
}
