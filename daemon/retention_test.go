package daemon

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// cellRequests counts every store request under cells/ (a cell's
// ownership record, trim point and log; not the node leases).
type cellRequests struct {
	bucket.Bucket
	n atomic.Int64
}

func (c *cellRequests) count(key string) {
	if strings.HasPrefix(key, "cells/") {
		c.n.Add(1)
	}
}

func (c *cellRequests) Get(ctx context.Context, key string, max int64) (bucket.Object, error) {
	c.count(key)
	return c.Bucket.Get(ctx, key, max)
}

func (c *cellRequests) Head(ctx context.Context, key string) (bucket.Info, error) {
	c.count(key)
	return c.Bucket.Head(ctx, key)
}

func (c *cellRequests) Put(ctx context.Context, key string, body []byte, cond bucket.Condition) (string, error) {
	c.count(key)
	return c.Bucket.Put(ctx, key, body, cond)
}

func (c *cellRequests) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	c.count(key)
	return c.Bucket.Delete(ctx, key, cond)
}

func (c *cellRequests) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	c.count(in.Prefix)
	return c.Bucket.List(ctx, in)
}

// startRetentionDaemon is a daemon with Config.Retention set whose sweep
// the test runs by hand (the ticker's is at most every 10 s, and the test
// calls retentionSweep itself).
func startRetentionDaemon(t testing.TB, b bucket.Bucket, retention time.Duration) *testDaemon {
	t.Helper()
	d, err := Open(t.Context(), Config{Node: "a", Advertise: "http://a", TTL: 2 * time.Second, Version: testVersion}, b, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	d.cfg.Retention = retention // after Open: no ticker, the test sweeps
	td := &testDaemon{d: d, srv: httptest.NewServer(d.handler(APIConfig{MaxBody: 1 << 20, MaxLimit: 1000}))}
	t.Cleanup(func() { td.stop(t) })
	return td
}

// With a retention, the sweep trims the records older than it on a held
// cell; a sweep where nothing expired sends no store request at all (the
// first sweep of a lease learns the trim point and the first record).
func TestRetentionTrimsExpiredWithoutIdleRequests(t *testing.T) {
	m := fakes3.NewMem()
	cb := &cellRequests{Bucket: m.Client("a")}
	a := startRetentionDaemon(t, cb, 200*time.Millisecond)
	for _, rec := range []string{"1", "2", "3"} {
		if st, res := a.call(t, "POST", "/v1/cells/c/append", rec); st != 200 {
			t.Fatalf("append: %d %v", st, res)
		}
	}
	ctx := t.Context()
	a.d.retentionSweep(ctx) // learns: the trim point (0) and record 1
	before := cb.n.Load()
	for range 100 {
		a.d.retentionSweep(ctx)
	}
	if got := cb.n.Load() - before; got != 0 {
		t.Fatalf("100 sweeps with nothing expired sent %d store requests, want 0", got)
	}
	if p, _, _ := replication.ReadTrim(ctx, m.Client("x"), "c"); p != 0 {
		t.Fatalf("trim point %d before anything expired", p)
	}
	time.Sleep(250 * time.Millisecond) // 1..3 expire
	if st, res := a.call(t, "POST", "/v1/cells/c/append", "4"); st != 200 {
		t.Fatalf("append: %d %v", st, res)
	}
	a.d.retentionSweep(ctx)
	if p, _, err := replication.ReadTrim(ctx, m.Client("x"), "c"); err != nil || p != 4 {
		t.Fatalf("trim point %d, %v after 1..3 expired; want 4", p, err)
	}
	st, res := a.call(t, "GET", "/v1/cells/c/records?after=0", "")
	wantErr(t, st, res, 410, errcode.CodeTrimmed)
	trimDeletesDone(t, a.d) // the deletion below the trim is not the sweep's
	before = cb.n.Load()
	for range 100 {
		a.d.retentionSweep(ctx)
	}
	if got := cb.n.Load() - before; got != 0 {
		t.Fatalf("100 sweeps after the trim, nothing expired, sent %d store requests, want 0", got)
	}
	// Everything expires; the log then ends at the trim point, and sweeps
	// stay free until a record is appended.
	time.Sleep(250 * time.Millisecond)
	a.d.retentionSweep(ctx)
	if p, _, _ := replication.ReadTrim(ctx, m.Client("x"), "c"); p != 5 {
		t.Fatalf("trim point %d after every record expired; want 5", p)
	}
	trimDeletesDone(t, a.d)
	before = cb.n.Load()
	for range 100 {
		a.d.retentionSweep(ctx)
	}
	if got := cb.n.Load() - before; got != 0 {
		t.Fatalf("100 sweeps of a cell whose records all expired sent %d store requests, want 0", got)
	}
}

// trimDeletesDone waits until d's background deletion below trim points
// has nothing left to do.
func trimDeletesDone(t *testing.T, d *Daemon) {
	t.Helper()
	waitFor(t, "the background deletion below the trim point to finish", func() bool {
		d.tr.mu.Lock()
		defer d.tr.mu.Unlock()
		return !d.tr.running && len(d.tr.pending) == 0
	})
}
