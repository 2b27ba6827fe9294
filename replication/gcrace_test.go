package replication_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// gcUnderWalk is the race GC's delete order exists for, set up step by
// step: a new owner's fencing walk starts from a record below a range GC
// deletes, and meets the hole while GC is half-way through it.
//
//   - A (epoch 1) writes txids 1–3. B takes the cell over (forced: A is
//     alive and does not know yet) and opens its log: it lists, picks A's
//     newest record, 3, as its anchor, and asks for slot 4 — a request that
//     takes a second to be served.
//   - Meanwhile A writes 4–6, snapshots at 6 and closes (a seal at 7), and
//     GC starts deleting A's files 1–6 (every one covered by the snapshot,
//     the epoch sealed). It stalls right after deleting slot 4: its next
//     DELETE hangs until the request times out (10 s, the default), and the
//     retry goes through.
//   - B's read of slot 4 is served: missing. Is it the end of A's chain, or
//     a hole GC made? B's anchor, slot 3, says: GC deletes in txid order,
//     so if slot 4 is gone, slot 3 went first.
//
// It returns B's log (its Start says where B's chain begins), B's lease and
// the protocol's log lines; GC has finished when it returns.
func gcUnderWalk(t *testing.T, m *fakes3.Mem) (logB *replication.Log, lb *owner.Lease, logged func() string) {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var lines strings.Builder
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &lines}, nil))
	logged = func() string { mu.Lock(); defer mu.Unlock(); return lines.String() }

	a := m.Client("a")
	la := claim(t, a, "a", false)
	logA := open(t, a, la)
	g := newLedger()
	appendN(t, g, logA, la, "a", 3) // txids 1..3

	m.Inject(fakes3.Rule{Client: "b", Op: fakes3.OpGet, Key: replication.SlotKey(cell, 1, 4), Latency: time.Second, Times: 1})
	gcPaused := false // GC pauses on its first DELETE after slot 4's
	m.Inject(fakes3.Rule{Client: "gc", Op: fakes3.OpDelete, Latency: time.Hour, Times: 1, Match: func(_ fakes3.Op, key string) bool {
		if gcPaused {
			return true
		}
		gcPaused = key == replication.SlotKey(cell, 1, 4)
		return false
	}})

	b := m.Client("b")
	lb = claim(t, b, "b", true)
	opened := make(chan error, 1)
	go func() {
		var err error
		logB, err = replication.Open(ctx, b, lb, replication.WithLogger(logger))
		opened <- err
	}()
	synctest.Wait() // B listed, anchored at slot 3, and waits for slot 4

	appendN(t, g, logA, la, "x", 3) // txids 4..6
	if _, err := logA.Snapshot(ctx, la, 6, []byte("state@6")); err != nil {
		t.Fatal(err)
	}
	if err := logA.Close(ctx); err != nil { // seals e1/7
		t.Fatal(err)
	}
	gcDone := make(chan error, 1)
	go func() {
		_, err := replication.GC(ctx, m.Client("gc"), cell, replication.GCOptions{DropKeyWindow: true})
		gcDone <- err
	}()
	if err := <-opened; err != nil {
		t.Fatalf("B's open: %v", err)
	}
	if err := <-gcDone; err != nil {
		t.Fatalf("gc: %v", err)
	}
	return logB, lb, logged
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// With GC deleting in txid order, B's anchor is gone by the time B meets
// the hole: the walk starts again instead of sealing it, and B's chain
// begins after A's, at slot 7 — no seal in the middle of A's chain, and
// B's record is restored after A's snapshot.
func TestFencingWalkRestartsWhenGCDeletesUnderIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := fakes3.NewMem()
		logB, lb, logged := gcUnderWalk(t, m)
		defer logB.Close(ctx) // before the bubble ends: no writer may linger
		if !strings.Contains(logged(), "fencing walk raced with GC") {
			t.Fatalf("B's walk never met the hole; the test no longer sets up the race:\n%s", logged())
		}
		if h := logB.Start(); h.Next != 7 || h.NextPos != 7 {
			t.Fatalf("B's chain starts at %+v, want tx 7 pos 7 (after A's seal)", h)
		}
		for tx := replication.TxID(1); tx <= 6; tx++ {
			if _, ok := m.Bytes(replication.SlotKey(cell, 1, tx)); ok {
				t.Fatalf("e1/%d survived GC (or was sealed by B)", tx)
			}
		}
		res, err := logB.Append(ctx, lb, []byte("b0"))
		if err != nil || res.Pos != 7 {
			t.Fatalf("B's append: %+v %v", res, err)
		}
		var state string
		var got []string
		if _, err := replication.Restore(ctx, m, cell,
			func(s replication.Snapshot) error { state = string(s.State); return nil },
			func(r replication.Record) error { got = append(got, string(r.Data)); return nil }); err != nil {
			t.Fatal(err)
		}
		if state != "state@6" || !slices.Equal(got, []string{"b0"}) {
			t.Fatalf("restore: state %q, records %q; want state@6, [b0]", state, got)
		}
	})
}

// A restore from a snapshot that a stale owner writes again after GC
// deleted it. A (epoch 1) writes txids 1–4 and snapshots at 3. A restore
// lists (the snapshot at 3 is the newest), reads it, and asks for slot 4 —
// a request that takes a second. Meanwhile A snapshots at 4, B takes over
// (sealing epoch 1 at 5), GC deletes the snapshot at 3 and slots 1–4, and A,
// which has not learnt it lost the cell, snapshots at 3 again: the same
// bytes, one create-only PUT, which succeeds now that the key is free. The
// restore's read of slot 4 is served: missing. Its anchor is there again,
// so only a LIST tells the hole from the end: a snapshot at 4 exists, so
// slot 4 held a record. The restore must fail and be retried, never return
// the log cut short.
func TestRestoreFromSnapshotWrittenAgainAfterGC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := fakes3.NewMem()
		a := m.Client("a")
		la := claim(t, a, "a", false)
		logA := open(t, a, la)
		g := newLedger()
		appendN(t, g, logA, la, "a", 4) // txids 1..4
		if _, err := logA.Snapshot(ctx, la, 3, []byte("s3")); err != nil {
			t.Fatal(err)
		}
		m.Inject(fakes3.Rule{Client: "r", Op: fakes3.OpGet, Key: replication.SlotKey(cell, 1, 4), Latency: time.Second, Times: 1})
		type result struct {
			recs []string
			err  error
		}
		done := make(chan result, 1)
		go func() {
			var got []string
			_, err := replication.Restore(ctx, m.Client("r"), cell, nil, func(r replication.Record) error {
				got = append(got, string(r.Data))
				return nil
			})
			done <- result{got, err}
		}()
		synctest.Wait() // the restore waits for slot 4

		if _, err := logA.Snapshot(ctx, la, 4, []byte("s4")); err != nil {
			t.Fatal(err)
		}
		lb := claim(t, m, "b", true)
		open(t, m, lb) // seals e1/5
		rep, err := replication.GC(ctx, m, cell, replication.GCOptions{DropKeyWindow: true})
		if err != nil || !slices.Contains(rep.Deleted, replication.SnapshotKey(cell, 1, 3)) || !slices.Contains(rep.Deleted, replication.SlotKey(cell, 1, 4)) {
			t.Fatalf("gc: %+v %v", rep, err)
		}
		if _, err := logA.Snapshot(ctx, la, 3, []byte("s3")); err != nil {
			t.Fatalf("the stale owner's snapshot again: %v", err)
		}
		r := <-done
		if r.err == nil {
			t.Fatalf("restore returned %q from the snapshot at 3: the log cut short (a3 is at slot 4)", r.recs)
		}
		mustCode(t, r.err, errcode.CodeUnavailable)
	})
}

// A stale owner's read from its own index, after GC deleted its files and a
// PUT of it that was still travelling wrote the first one again: the walk
// from that file meets the hole above it. Every slot below the log's head
// was durable, so the read reports the positions compacted; it never
// returns the log cut short.
func TestLogReadFromResurrectedIndexFile(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	la := claim(t, m, "a", false)
	logA := open(t, m, la)
	g := newLedger()
	appendN(t, g, logA, la, "a", 3) // txids 1..3
	first := replication.SlotKey(cell, 1, 1)
	body, _ := m.Bytes(first)

	lb := claim(t, m, "b", true)
	logB := open(t, m, lb) // seals e1/4
	if _, err := logB.Snapshot(ctx, lb, 3, []byte("s3")); err != nil {
		t.Fatal(err)
	}
	rep, err := replication.GC(ctx, m, cell, replication.GCOptions{DropKeyWindow: true})
	if err != nil || !slices.Contains(rep.Deleted, first) {
		t.Fatalf("gc: %+v %v", rep, err)
	}
	m.Set(first, body) // the late PUT lands

	recs, err := logA.Read(ctx, 0, 0, false)
	if err == nil {
		t.Fatalf("read %q: the log cut short", data(recs))
	}
	if !errors.Is(err, replication.ErrCompacted) {
		t.Fatalf("read: %v, want ErrCompacted", err)
	}
}
