package replication_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// getLog records the keys of every GET under the log.
func getLog(m *fakes3.Mem) (keys func() []string) {
	var mu sync.Mutex
	var got []string
	m.Inject(fakes3.Rule{Op: fakes3.OpGet, KeyPrefix: replication.LogPrefix(cell), Match: func(_ fakes3.Op, k string) bool {
		mu.Lock()
		got = append(got, k)
		mu.Unlock()
		return false
	}})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := slices.Clone(got)
		got = got[:0]
		return out
	}
}

func TestSnapshotAndGC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := fakes3.NewMem()
		gets := getLog(m)
		a, b := m.Client("a"), m.Client("b")
		la := claim(t, a, "a", false)
		logA := open(t, a, la)
		g := newLedger()
		appendN(t, g, logA, la, "a", 10) // txids 1..10
		snap, err := logA.Snapshot(ctx, la, 7, []byte("state@7"))
		if err != nil {
			t.Fatal(err)
		}
		if snap.NextPos != 8 || snap.Key != replication.SnapshotKey(cell, 1, 7) {
			t.Fatalf("snapshot %+v", snap)
		}
		if _, err := logA.Snapshot(ctx, la, 7, []byte("state@7")); err != nil {
			t.Fatalf("the same snapshot again: %v", err)
		}
		_, err = logA.Snapshot(ctx, la, 7, []byte("other"))
		mustCode(t, err, errcode.CodeBadRequest)
		_, err = logA.Snapshot(ctx, la, 11, nil)
		mustCode(t, err, errcode.CodeBadRequest) // not durable yet
		appendN(t, g, logA, la, "b", 3)          // txids 11..13

		// Restore reads the snapshot and the files after it, nothing older.
		gets()
		c0 := m.Counts()
		var state string
		var got []string
		h, err := replication.Restore(ctx, m, cell,
			func(s replication.Snapshot) error { state = string(s.State); return nil },
			func(r replication.Record) error { got = append(got, string(r.Data)); return nil })
		if err != nil {
			t.Fatal(err)
		}
		read := gets()
		if d := m.Counts().Sub(c0); d.Get != 1+7 || d.Put != 0 {
			t.Fatalf("restore made %+v requests, want 8 GETs (the snapshot, slots 8..13, the missing 14)", d)
		}
		want := []string{replication.SnapshotKey(cell, 1, 7)}
		for tx := replication.TxID(8); tx <= 14; tx++ {
			want = append(want, replication.SlotKey(cell, 1, tx))
		}
		if !slices.Equal(read, want) {
			t.Fatalf("restore read\n%q\nwant\n%q", read, want)
		}
		if state != "state@7" || !slices.Equal(got, []string{"a7", "a8", "a9", "b0", "b1", "b2"}) || h.Next != 14 || h.NextPos != 14 {
			t.Fatalf("restore: state %q records %q head %+v", state, got, h)
		}

		// The old owner pauses with an append in flight (its PUT has not
		// reached the store); a new owner takes over, snapshots, and GC runs.
		unpause := m.Inject(fakes3.Rule{Op: fakes3.OpPut, Client: "a", Latency: time.Hour})
		paused := make(chan error, 1)
		go func() { paused <- g.append(ctx, logA, la, "a-paused") }()
		lb := claim(t, b, "b", true)
		logB := open(t, b, lb)          // seals e1/14
		appendN(t, g, logB, lb, "c", 2) // txids 14, 15
		lx := claim(t, m, "x", true)    // epoch 3 announces, then crashes before sealing
		if err := replication.Announce(ctx, m, lx); err != nil {
			t.Fatal(err)
		}
		lc := claim(t, m, "c", true) // epoch 4 seals e2/16, tombstones e3/16
		logC := open(t, m, lc)
		appendN(t, g, logC, lc, "d", 2) // txids 16, 17
		if _, err := logC.Snapshot(ctx, lc, 16, []byte("state@16")); err != nil {
			t.Fatal(err)
		}

		dry, err := replication.GC(ctx, m, cell, replication.GCOptions{DryRun: true, DropKeyWindow: true})
		if err != nil {
			t.Fatal(err)
		}
		keysBefore := m.Keys(replication.LogPrefix(cell))
		rep, err := replication.GC(ctx, m, cell, replication.GCOptions{DropKeyWindow: true})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(dry.Deleted, rep.Deleted) || !dry.DryRun {
			t.Fatalf("dry run %q, real run %q", dry.Deleted, rep.Deleted)
		}
		var wantDeleted []string
		wantDeleted = append(wantDeleted, replication.SnapshotKey(cell, 1, 7))
		for tx := replication.TxID(1); tx <= 13; tx++ {
			wantDeleted = append(wantDeleted, replication.SlotKey(cell, 1, tx))
		}
		wantDeleted = append(wantDeleted, replication.SlotKey(cell, 2, 14), replication.SlotKey(cell, 2, 15))
		if !slices.Equal(rep.Deleted, wantDeleted) {
			t.Fatalf("gc deleted\n%q\nwant\n%q", rep.Deleted, wantDeleted)
		}
		if rep.Markers != 3 {
			t.Fatalf("gc saw %d markers, want 3 (seals e1/14, e2/16, tombstone e3/16)", rep.Markers)
		}
		left := m.Keys(replication.LogPrefix(cell))
		for _, k := range keysBefore {
			if !slices.Contains(left, k) && !slices.Contains(wantDeleted, k) {
				t.Fatalf("%s vanished", k)
			}
		}
		for _, k := range []string{replication.SlotKey(cell, 1, 14), replication.SlotKey(cell, 2, 16), replication.SlotKey(cell, 3, 16),
			replication.SlotKey(cell, 4, 16), replication.SlotKey(cell, 4, 17), replication.SnapshotKey(cell, 4, 16)} {
			if !slices.Contains(left, k) {
				t.Fatalf("gc deleted %s", k)
			}
		}
		// GC again finds nothing more.
		if rep, err := replication.GC(ctx, m, cell, replication.GCOptions{DropKeyWindow: true}); err != nil || len(rep.Deleted) != 0 {
			t.Fatalf("second gc: %q %v", rep.Deleted, err)
		}

		// The paused owner wakes after GC: still fenced.
		unpause()
		time.Sleep(2 * time.Hour)
		err = <-paused
		mustCode(t, err, errcode.CodeSuperseded)
		mustCode(t, g.append(ctx, logA, la, "a-after"), errcode.CodeSuperseded)
		mustCode(t, g.append(ctx, logB, lb, "b-after"), errcode.CodeSuperseded)

		// Restore after GC: the newest snapshot and what follows.
		state, got = "", nil
		if _, err := replication.Restore(ctx, m, cell,
			func(s replication.Snapshot) error { state = string(s.State); return nil },
			func(r replication.Record) error { got = append(got, string(r.Data)); return nil }); err != nil {
			t.Fatal(err)
		}
		if state != "state@16" || !slices.Equal(got, []string{"d1"}) {
			t.Fatalf("restore after gc: %q %q", state, got)
		}
		if ls, err := replication.LatestSnapshot(ctx, m, cell); err != nil || ls == nil || ls.Key != replication.SnapshotKey(cell, 4, 16) || ls.NextPos != 17 {
			t.Fatalf("latest snapshot %+v %v", ls, err)
		}
		// Reading compacted positions says so.
		_, err = replication.Read(ctx, m, cell, 0, 0)
		mustCode(t, err, errcode.CodeBadRequest)
		if !errors.Is(err, replication.ErrCompacted) {
			t.Fatalf("%v does not wrap ErrCompacted", err)
		}
		recs, err := replication.Read(ctx, m, cell, 16, 0)
		if err != nil || !slices.Equal(data(recs), []string{"d1"}) {
			t.Fatalf("read after 16: %q %v", data(recs), err)
		}

		// A new owner after GC fences the chain and restores its state.
		ld := claim(t, m, "d", true)
		logD := open(t, m, ld)
		if h := logD.Start(); h.Next != 18 || h.NextPos != 18 {
			t.Fatalf("owner after gc starts at %+v", h)
		}
		state, got = "", nil
		if err := logD.Restore(ctx, func(s replication.Snapshot) error { state = string(s.State); return nil },
			func(r replication.Record) error { got = append(got, string(r.Data)); return nil }); err != nil {
			t.Fatal(err)
		}
		if state != "state@16" || !slices.Equal(got, []string{"d1"}) {
			t.Fatalf("log restore: %q %q", state, got)
		}
		mustCode(t, g.append(ctx, logC, lc, "c-after"), errcode.CodeSuperseded)
		for d := range g.acked {
			if strings.HasPrefix(d, "a-paused") {
				t.Fatalf("paused append acknowledged")
			}
		}

	})
}

// GC keeps everything when there is no snapshot, and a damaged snapshot
// stops it before it deletes anything.
func TestGCSafety(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	la := claim(t, m, "a", false)
	logA := open(t, m, la)
	g := newLedger()
	appendN(t, g, logA, la, "a", 3)
	rep, err := replication.GC(ctx, m, cell, replication.GCOptions{DropKeyWindow: true})
	if err != nil || len(rep.Deleted) != 0 || rep.Snapshot != "" {
		t.Fatalf("gc without snapshot: %+v %v", rep, err)
	}
	if _, err := logA.Snapshot(ctx, la, 3, []byte("s")); err != nil {
		t.Fatal(err)
	}
	// The snapshot's own epoch is live: nothing is deleted yet.
	rep, err = replication.GC(ctx, m, cell, replication.GCOptions{DropKeyWindow: true})
	if err != nil || len(rep.Deleted) != 0 {
		t.Fatalf("gc of a live epoch deleted %q %v", rep.Deleted, err)
	}
	if err := logA.Close(ctx); err != nil {
		t.Fatal(err)
	}
	k := replication.SnapshotKey(cell, 1, 3)
	body, _ := m.Bytes(k)
	m.Set(k, body[:len(body)-1])
	_, err = replication.GC(ctx, m, cell, replication.GCOptions{DropKeyWindow: true})
	mustCode(t, err, errcode.CodeCorruptTx)
	// Epoch 1 (a created lease) writes no announcement: 4 files, the
	// snapshot and the seal.
	if len(m.Keys(replication.LogPrefix(cell))) != 5 {
		t.Fatalf("gc with a damaged snapshot deleted files: %q", m.Keys(replication.LogPrefix(cell)))
	}
	m.Set(k, body)
	// Sealed by Close: now the epoch's records go; the snapshot and the
	// seal stay.
	rep, err = replication.GC(ctx, m, cell, replication.GCOptions{DropKeyWindow: true})
	if err != nil || len(rep.Deleted) != 3 ||
		!slices.Equal(m.Keys(replication.LogPrefix(cell)), []string{k, replication.SlotKey(cell, 1, 4)}) {
		t.Fatalf("gc of a closed epoch: %+v %v", rep, err)
	}
}
