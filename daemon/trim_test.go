package daemon

import (
	"errors"
	"log/slog"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// POST trim raises the trim point on the holder, refusing one past the
// committed tail or (without past_snapshot) past the newest snapshot's
// successor, never moves it back, and reads that start below it answer
// 410 DEED-E046 naming the first position served.
func TestTrimEndpoint(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	for _, rec := range []string{"1", "2", "3", "4", "5", "6"} {
		if st, res := a.call(t, "POST", "/v1/cells/c/append", rec); st != 200 {
			t.Fatalf("append: %d %v", st, res)
		}
	}
	for _, bad := range []string{"", "x", "-1"} {
		st, res := a.call(t, "POST", "/v1/cells/c/trim?before="+bad, "")
		wantErr(t, st, res, 400, errcode.CodeBadRequest)
	}
	// Past the tail (next position 7), with or without past_snapshot.
	st, res := a.call(t, "POST", "/v1/cells/c/trim?before=8&past_snapshot=true", "")
	wantErr(t, st, res, 400, errcode.CodeBadRequest)
	if res["applied"] != "no" {
		t.Fatalf("past the tail: applied %v", res["applied"])
	}
	// No snapshot yet: the first position no snapshot covers is 1.
	st, res = a.call(t, "POST", "/v1/cells/c/trim?before=3", "")
	wantErr(t, st, res, 400, errcode.CodeBadRequest)
	if st, res := a.call(t, "PUT", "/v1/cells/c/snapshot?upto=3", "s3"); st != 200 {
		t.Fatalf("snapshot: %d %v", st, res)
	}
	st, res = a.call(t, "POST", "/v1/cells/c/trim?before=5", "")
	wantErr(t, st, res, 400, errcode.CodeBadRequest)
	if p, _, _ := replication.ReadTrim(t.Context(), m.Client("x"), "c"); p != 0 {
		t.Fatalf("a refused trim wrote trim point %d", p)
	}
	if st, res := a.call(t, "POST", "/v1/cells/c/trim?before=4", ""); st != 200 || res["before"] != 4.0 || res["epoch"] != 1.0 {
		t.Fatalf("trim before 4: %d %v", st, res)
	}
	if st, res := a.call(t, "POST", "/v1/cells/c/trim?before=2", ""); st != 200 || res["before"] != 4.0 {
		t.Fatalf("a lower trim moved the point: %d %v", st, res)
	}
	for _, after := range []string{"0", "2"} {
		got := send(t, "GET", a.srv.URL+"/v1/cells/c/records?after="+after, "")
		wantErr(t, got.status, got.body, 410, errcode.CodeTrimmed)
		if got.body["first_pos"] != 4.0 || got.hdr.Get(HeaderFirstPos) != "4" || got.body["applied"] != "no" {
			t.Fatalf("read after %s below the trim point: %+v", after, got)
		}
	}
	st, res = a.call(t, "GET", "/v1/cells/c/records?after=3", "")
	if recs, _ := res["records"].([]any); st != 200 || len(recs) != 3 || recs[0].(map[string]any)["pos"] != 4.0 {
		t.Fatalf("read from the trim point: %d %v", st, res)
	}
	// past_snapshot lets it pass the snapshot, up to the tail.
	if st, res := a.call(t, "POST", "/v1/cells/c/trim?before=7&past_snapshot=true", ""); st != 200 || res["before"] != 7.0 {
		t.Fatalf("trim past the snapshot: %d %v", st, res)
	}
	got := send(t, "GET", a.srv.URL+"/v1/cells/c/records?after=5", "")
	wantErr(t, got.status, got.body, 410, errcode.CodeTrimmed)
	if p, _, err := replication.ReadTrim(t.Context(), m.Client("x"), "c"); err != nil || p != 7 {
		t.Fatalf("durable trim point %d, %v; want 7", p, err)
	}
	// Waiting at the tail is still served.
	st, res = a.call(t, "GET", "/v1/cells/c/records?after=6", "")
	if recs, _ := res["records"].([]any); st != 200 || len(recs) != 0 {
		t.Fatalf("read at the tail: %d %v", st, res)
	}
}

// A node that does not hold the cell checks reads against a trim point
// at most trimRecheck old: within it a raise elsewhere may not be seen
// yet (the records are still there), after it the read is refused.
func TestTrimSeenByNonHolderWithinRecheck(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	b := startTestDaemon(t, m.Client("b"), "b", APIConfig{})
	for _, rec := range []string{"1", "2", "3"} {
		if st, res := a.call(t, "POST", "/v1/cells/c/append", rec); st != 200 {
			t.Fatalf("append: %d %v", st, res)
		}
	}
	if st, res := b.call(t, "GET", "/v1/cells/c/records?after=0", ""); st != 200 {
		t.Fatalf("read on b: %d %v", st, res)
	}
	if st, res := a.call(t, "POST", "/v1/cells/c/trim?before=3&past_snapshot=true", ""); st != 200 {
		t.Fatalf("trim: %d %v", st, res)
	}
	if st, res := b.call(t, "GET", "/v1/cells/c/records?after=0", ""); st != 200 {
		t.Fatalf("b within trimRecheck: %d %v", st, res)
	}
	b.d.tr.mu.Lock()
	s := b.d.tr.seen["c"]
	s.at = s.at.Add(-trimRecheck)
	b.d.tr.seen["c"] = s
	b.d.tr.mu.Unlock()
	st, res := b.call(t, "GET", "/v1/cells/c/records?after=0", "")
	wantErr(t, st, res, 410, errcode.CodeTrimmed)
	if res["first_pos"] != 3.0 {
		t.Fatalf("b after trimRecheck: %v", res)
	}
}

// The holder deletes, in the background, the record files wholly below
// the trim point that the snapshot covers in a sealed epoch, and nothing
// at or above the trim point; a read from the trim point and a new
// owner's read from the snapshot still work.
func TestTrimDeletesBelowInBackground(t *testing.T) {
	m := fakes3.NewMem()
	raw := m.Client("x")
	// An idempotency window of 1 ms: GC keeps the files of the window
	// (a new owner learns its keys from them), so a trim deletes below
	// it only once they have left it.
	d, err := Open(t.Context(), Config{Node: "a", Advertise: "http://a", TTL: 2 * time.Second, Version: testVersion, KeyWindow: time.Millisecond}, m.Client("a"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	a := &testDaemon{d: d, srv: httptest.NewServer(d.handler(APIConfig{MaxBody: 1 << 20, MaxLimit: 1000}))}
	t.Cleanup(func() { a.stop(t) })
	for _, rec := range []string{"1", "2", "3", "4", "5"} {
		if st, res := a.call(t, "POST", "/v1/cells/c/append", rec); st != 200 {
			t.Fatalf("append: %d %v", st, res)
		}
	}
	// Epoch 1 sealed by its release; epoch 2 writes on, after the window.
	time.Sleep(5 * time.Millisecond)
	if st, res := a.call(t, "POST", "/v1/cells/c/release", ""); st != 200 {
		t.Fatalf("release: %d %v", st, res)
	}
	if st, res := a.call(t, "POST", "/v1/cells/c/append", "6"); st != 200 || res["epoch"] != 2.0 {
		t.Fatalf("append at epoch 2: %d %v", st, res)
	}
	if st, res := a.call(t, "PUT", "/v1/cells/c/snapshot?upto=5", "s5"); st != 200 {
		t.Fatalf("snapshot: %d %v", st, res)
	}
	if st, res := a.call(t, "POST", "/v1/cells/c/trim?before=4", ""); st != 200 {
		t.Fatalf("trim: %d %v", st, res)
	}
	exists := func(txid replication.TxID) bool {
		_, err := raw.Get(t.Context(), replication.SlotKey("c", 1, txid), 1<<20)
		if err != nil && !errors.Is(err, bucket.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	waitTrimDeletes(t, a.d)
	for txid := replication.TxID(1); txid <= 3; txid++ {
		if exists(txid) {
			t.Errorf("e1/%d (below the trim point, covered) was not deleted", txid)
		}
	}
	for txid := replication.TxID(4); txid <= 6; txid++ { // 4, 5: records; 6: epoch 1's seal
		if !exists(txid) {
			t.Errorf("e1/%d (at or above the trim point, or a seal) was deleted", txid)
		}
	}
	st, res := a.call(t, "GET", "/v1/cells/c/records?after=3", "")
	if recs, _ := res["records"].([]any); st != 200 || len(recs) != 3 {
		t.Fatalf("read from the trim point: %d %v", st, res)
	}
	b := startTestDaemon(t, m.Client("b"), "b", APIConfig{})
	st, res = b.call(t, "GET", "/v1/cells/c/records?after=5", "")
	if recs, _ := res["records"].([]any); st != 200 || len(recs) != 1 {
		t.Fatalf("read after the snapshot on another node: %d %v", st, res)
	}
}

// waitTrimDeletes waits until d's background trim deletion has run
// through its queue.
func waitTrimDeletes(t *testing.T, d *Daemon) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		d.tr.mu.Lock()
		busy := d.tr.running || len(d.tr.pending) > 0
		d.tr.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the background trim deletion did not finish in 10 s")
		}
	}
}

// The background deletion sends at most TrimDeleteRate deletes a second:
// 21 paced deletes at 10 a second take 2 s of (virtual) time, not less.
func TestTrimDeletePaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &Daemon{cfg: Config{TrimDeleteRate: 10}}
		start := time.Now()
		for range 21 {
			if err := d.paceDelete(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if got := time.Since(start); got != 2*time.Second {
			t.Fatalf("21 deletes at 10/s took %v, want 2s", got)
		}
	})
}
