package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/daemon/daemontest"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// openIdleDaemon opens node "a" on b with idle release after idle and at
// most maxCells cells, and closes it when the test ends.
func openIdleDaemon(t *testing.T, b bucket.Bucket, idle time.Duration, maxCells int) (*Daemon, http.Handler) {
	t.Helper()
	d := openTestDaemonConfig(t, b, Config{Node: "a", Advertise: "http://a", TTL: 2 * time.Second, IdleRelease: idle, MaxCells: maxCells})
	return d, d.handler(APIConfig{MaxBody: 1 << 20, MaxLimit: 1000})
}

// releasedCount is deed_cells_released_total{reason}.
func releasedCount(t *testing.T, d *Daemon, reason string) int {
	t.Helper()
	var m dto.Metric
	if err := d.m.cellsReleased.WithLabelValues(reason).Write(&m); err != nil {
		t.Fatal(err)
	}
	return int(m.GetCounter().GetValue())
}

// mustAppend appends data to cell through h and fails the test unless it
// is acknowledged.
func mustAppend(t *testing.T, h http.Handler, cell, data string) {
	t.Helper()
	if a := serveAppend(t, h, cell, data); a.Status != 200 {
		t.Fatalf("append to %s: %v", cell, a)
	}
}

// checkRetired checks that cell is released in the bucket, at epoch, with
// the log of that epoch sealed, and no longer held by d.
func checkRetired(t *testing.T, d *Daemon, m *fakes3.Mem, cell string, epoch uint64) {
	t.Helper()
	rec, exists, err := owner.Inspect(context.Background(), m, cell)
	if err != nil || !exists || !rec.Released() || rec.Epoch != epoch {
		t.Fatalf("record of %s: %+v exists=%v err=%v, want released at epoch %d", cell, rec, exists, err, epoch)
	}
	if d.held(cell) != nil {
		t.Fatalf("%s still held after its release", cell)
	}
	keys := m.Keys(replication.EpochPrefix(cell, epoch))
	if len(keys) == 0 {
		t.Fatalf("epoch %d of %s has no files", epoch, cell)
	}
	last := keys[len(keys)-1]
	body, _ := m.Bytes(last)
	f, err := replication.Decode(last, body)
	if err != nil || f.Kind != replication.KindSeal {
		t.Fatalf("the end of epoch %d of %s (%s) is %+v (err %v), want a seal", epoch, cell, last, f, err)
	}
}

// checkRecords checks that cell's log holds exactly want, in order.
func checkRecords(t *testing.T, b bucket.Bucket, cell string, want ...string) {
	t.Helper()
	recs, err := replication.Read(context.Background(), b, cell, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, string(r.Data))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("records of %s: %q, want %q", cell, got, want)
	}
}

// A cell with no request for IdleRelease is sealed and released (counted,
// and shown as an event); its next append claims it again, at the next
// epoch, and every earlier record is still there.
func TestIdleCellIsReleasedAndClaimedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		const idle = 10 * time.Second
		d, h := openIdleDaemon(t, m, idle, 0)
		mustAppend(t, h, "c", "one")
		mustAppend(t, h, "c", "two")
		time.Sleep(idle - time.Second)
		synctest.Wait()
		if d.held("c") == nil {
			t.Fatal("released before it was idle for IdleRelease")
		}
		time.Sleep(time.Second + idleSweepEvery(idle))
		synctest.Wait()
		checkRetired(t, d, m, "c", 1)
		if n := releasedCount(t, d, releasedIdle); n != 1 {
			t.Fatalf("deed_cells_released_total{reason=idle} = %d, want 1", n)
		}
		if ev := d.events.recent(); len(ev) == 0 || ev[0].Kind != "idle_release" || ev[0].Cell != "c" {
			t.Fatalf("events: %+v, want an idle_release of c", ev)
		}
		mustAppend(t, h, "c", "three")
		if c := d.held("c"); c == nil || c.lease.Epoch() != 2 {
			t.Fatalf("after the idle release the append did not claim c again at epoch 2: %+v", c)
		}
		checkRecords(t, m, "c", "one", "two", "three")
	})
}

// A cell used (appended to, or read) more often than IdleRelease stays
// held, and so does one whose only request runs longer than IdleRelease: it
// is in flight, not idle.
func TestUsedCellIsKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		la := newLostAnswers(m, "cells/slow/ltx/")
		// Shorter than the log's request timeout (10 s), so that the held
		// PUT below stays in flight for 3×IdleRelease.
		const idle = 2 * time.Second
		every := idleSweepEvery(idle)
		d, h := openIdleDaemon(t, la, idle, 0)
		mustAppend(t, h, "read", "r")
		for i := range 12 {
			mustAppend(t, h, "busy", fmt.Sprint(i))
			// Reads of a held cell are use too.
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/v1/cells/read/records?barrier=true", nil))
			if rec.Code != 200 {
				t.Fatalf("read: %d %s", rec.Code, rec.Body)
			}
			time.Sleep(idle / 2)
		}
		for _, cell := range []string{"busy", "read"} {
			if c := d.held(cell); c == nil || c.lease.Epoch() != 1 {
				t.Fatalf("%s, used every IdleRelease/2, was released", cell)
			}
		}

		mustAppend(t, h, "slow", "first")
		la.arm(true)
		answer := make(chan appendAnswer, 1)
		go func() { answer <- serveAppend(t, h, "slow", "long") }()
		<-la.landed // its PUT landed; its answer is held back
		time.Sleep(3 * idle)
		synctest.Wait()
		if d.held("slow") == nil {
			t.Fatal("a cell with an append in flight for 3×IdleRelease was released")
		}
		close(la.release)
		if a := <-answer; a.Status != 200 {
			t.Fatalf("the long append: %v", a)
		}
		// Its end counts as use: the cell goes only IdleRelease after it.
		time.Sleep(idle - every)
		synctest.Wait()
		if d.held("slow") == nil {
			t.Fatal("released before IdleRelease had passed since the long append ended")
		}
		time.Sleep(2 * every)
		synctest.Wait()
		checkRetired(t, d, m, "slow", 1)
		checkRecords(t, m, "slow", "first", "long")
	})
}

// IdleRelease 0 (and no MaxCells) runs no sweep: a cell stays held for as
// long as the node runs.
func TestIdleReleaseZeroKeepsCells(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		d, h := openIdleDaemon(t, m, 0, 0)
		mustAppend(t, h, "c", "x")
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		if d.idle != nil || d.held("c") == nil {
			t.Fatal("a cell was released with idle release off")
		}
	})
}

// Above MaxCells the least recently used cells are released first, at once
// (not at the next periodic sweep), and only down to MaxCells.
func TestMaxCellsReleasesLeastRecentlyUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		d, h := openIdleDaemon(t, m, 0, 2)
		mustAppend(t, h, "a", "a1")
		time.Sleep(time.Second)
		mustAppend(t, h, "b", "b1")
		time.Sleep(time.Second)
		mustAppend(t, h, "a", "a2") // a is now the more recently used
		time.Sleep(time.Second)
		mustAppend(t, h, "c", "c1") // three held: b goes
		synctest.Wait()
		checkRetired(t, d, m, "b", 1)
		if d.held("a") == nil || d.held("c") == nil {
			t.Fatal("a recently used cell was released instead of the least recently used")
		}
		if n := releasedCount(t, d, releasedMaxCells); n != 1 || d.countHeld() != 2 {
			t.Fatalf("released %d for max_cells, %d held; want 1 and 2", n, d.countHeld())
		}
		mustAppend(t, h, "b", "b2") // b is claimed again; a is now the oldest
		synctest.Wait()
		checkRetired(t, d, m, "a", 1)
		checkRecords(t, m, "b", "b1", "b2")
		checkRecords(t, m, "a", "a1", "a2")
	})
}

// An idle release whose seal fails (a store outage) leaves the cell's
// appends refused, as any failed retire does; the next sweep retries it
// even though those refused appends keep the cell looking used, and then
// the cell is claimed again and serves appends.
func TestFailedIdleReleaseIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		const idle, ttl = 10 * time.Second, 2 * time.Second
		every := idleSweepEvery(idle)
		d, h := openIdleDaemon(t, m, idle, 0)
		mustAppend(t, h, "c", "one")
		remove := m.Inject(fakes3.Rule{Op: fakes3.OpPut, KeyPrefix: replication.EpochPrefix("c", 1), Fault: fakes3.ErrBefore})
		// The sweep at IdleRelease tries, and gives up after one TTL; the
		// next sweep comes every/5 later. An append in between (not during a
		// retire: it would wait on the cell's lock, which synctest cannot
		// tell from a deadlock) is refused, and stamps the cell as used.
		time.Sleep(idle + ttl + every/10)
		synctest.Wait()
		if releasedCount(t, d, releasedIdle) != 0 || d.held("c") == nil {
			t.Fatal("released although its seal failed")
		}
		if a := serveAppend(t, h, "c", "refused"); a.Status == 200 || a.Applied != "no" {
			t.Fatalf("append while the failed release is pending: %v, want refused", a)
		}
		remove()
		time.Sleep(every)
		synctest.Wait()
		checkRetired(t, d, m, "c", 1)
		mustAppend(t, h, "c", "two")
		checkRecords(t, m, "c", "one", "two")
	})
}

// Appends that arrive just as their cells are released for idleness are
// acknowledged (or retried on the cell claimed again), never refused, and
// every acknowledged record is in the log once. Each writer sleeps exactly
// IdleRelease (or one sweep period more) after its last append, so that
// its next append and the sweep that finds the cell idle run at the same
// virtual instant, again and again.
func TestAppendRacingIdleReleaseIsNotRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		const idle = 2 * time.Second
		every := idleSweepEvery(idle)
		d, h := openIdleDaemon(t, m, idle, 0)
		const cells, each = 16, 20
		answers := make([][]appendAnswer, cells)
		var wg sync.WaitGroup
		for c := range cells {
			wg.Go(func() {
				cell := fmt.Sprintf("c%d", c)
				for i := range each {
					a := serveAppend(t, h, cell, fmt.Sprintf("%s-%d", cell, i))
					answers[c] = append(answers[c], a)
					time.Sleep(idle + time.Duration((i+c)%2)*every)
				}
			})
		}
		wg.Wait()
		for c, as := range answers {
			for _, a := range as {
				if a.Status != 200 {
					t.Errorf("%s: an idle release must not refuse an append", a)
				}
			}
			daemontest.CheckAnswers(t, m, fmt.Sprintf("c%d", c), as)
		}
		if releasedCount(t, d, releasedIdle) == 0 {
			t.Fatal("no cell was released during the appends: the test proved nothing")
		}
		t.Logf("%d idle releases during %d appends", releasedCount(t, d, releasedIdle), cells*each)
	})
}

// A negative IdleRelease or MaxCells is a bad request, refused before
// anything is written.
func TestIdleConfigNegativeRefused(t *testing.T) {
	m := fakes3.NewMem()
	for _, cfg := range []Config{{Node: "a", TTL: 2 * time.Second, IdleRelease: -time.Second}, {Node: "a", TTL: 2 * time.Second, MaxCells: -1}} {
		if _, err := Open(t.Context(), cfg, m, slog.New(slog.DiscardHandler)); errcode.CodeOf(err) != errcode.CodeBadRequest {
			t.Fatalf("Open(%+v): %v, want DEED-E040", cfg, err)
		}
	}
	if n := m.Counts().Put; n != 0 {
		t.Fatalf("a refused config wrote %d objects", n)
	}
}

// The plan of one sweep: retries of failed releases first, then idle cells
// oldest first, then the least recently used down to MaxCells; never a busy
// cell; at most a batch.
func TestPlanIdleSweep(t *testing.T) {
	now := time.Unix(1000, 0)
	at := func(ago time.Duration) int64 { return now.Add(-ago).UnixNano() }
	held := []idleCandidate{
		{name: "fresh", lastUsed: at(time.Second)},
		{name: "old", lastUsed: at(time.Hour)},
		{name: "older-busy", lastUsed: at(2 * time.Hour), busy: true},
		{name: "idle", lastUsed: at(11 * time.Minute)},
		{name: "recent", lastUsed: at(time.Minute)},
		{name: "failed", lastUsed: at(0), retry: releasedMaxCells},
	}
	names := func(p []idleRetire) string {
		var s []string
		for _, r := range p {
			s = append(s, r.name+":"+r.reason)
		}
		return strings.Join(s, " ")
	}
	for _, tc := range []struct {
		idle     time.Duration
		maxCells int
		batch    int
		want     string
	}{
		{10 * time.Minute, 0, 100, "failed:max_cells old:idle idle:idle"},
		{0, 0, 100, "failed:max_cells"},
		{0, 3, 100, "failed:max_cells old:max_cells idle:max_cells"},
		{10 * time.Minute, 2, 100, "failed:max_cells old:idle idle:idle recent:max_cells"},
		{10 * time.Minute, 0, 2, "failed:max_cells old:idle"},
		{0, 1, 100, "failed:max_cells old:max_cells idle:max_cells recent:max_cells fresh:max_cells"},
	} {
		if got := names(planIdleSweep(held, now, tc.idle, tc.maxCells, tc.batch)); got != tc.want {
			t.Errorf("idle %v, max %d, batch %d: %q, want %q", tc.idle, tc.maxCells, tc.batch, got, tc.want)
		}
	}
}
