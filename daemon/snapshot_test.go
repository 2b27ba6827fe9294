package daemon

import (
	"testing"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

// PUT snapshot writes the state covering the records up to ?upto= on the
// holder, refusing a position not committed or inside a batch; GET
// snapshot answers the newest one's state and last position, and a read
// after that position continues from it.
func TestSnapshotPutGet(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	for _, rec := range []string{"1", "2", "3"} {
		if st, res := a.call(t, "POST", "/v1/cells/c/append", rec); st != 200 {
			t.Fatalf("append: %d %v", st, res)
		}
	}
	if st, res := a.call(t, "POST", "/v1/cells/c/batch", `{"records":[{"data":"NA=="},{"data":"NQ=="}]}`, "Content-Type", "application/json"); st != 200 || res["last_pos"] != 5.0 {
		t.Fatalf("batch: %d %v", st, res)
	}
	if st, res := a.call(t, "POST", "/v1/cells/c/append", "6"); st != 200 {
		t.Fatalf("append: %d %v", st, res)
	}
	got := send(t, "GET", a.srv.URL+"/v1/cells/c/snapshot", "")
	wantErr(t, got.status, got.body, 404, errcode.CodeNoSnapshot)
	for _, bad := range []string{"4", "7", "0", "x", ""} {
		st, res := a.call(t, "PUT", "/v1/cells/c/snapshot?upto="+bad, "s")
		wantErr(t, st, res, 400, errcode.CodeBadRequest)
	}
	if st, res := a.call(t, "PUT", "/v1/cells/c/snapshot?upto=3", "state3"); st != 200 || res["pos"] != 3.0 || res["epoch"] != 1.0 {
		t.Fatalf("snapshot up to 3: %d %v", st, res)
	}
	got = send(t, "GET", a.srv.URL+"/v1/cells/c/snapshot", "")
	if got.status != 200 || got.body["raw"] != "state3" || got.hdr.Get(HeaderSnapshotPos) != "3" {
		t.Fatalf("GET snapshot: %+v", got)
	}
	if st, res := a.call(t, "PUT", "/v1/cells/c/snapshot?upto=5", "state5"); st != 200 || res["pos"] != 5.0 {
		t.Fatalf("snapshot up to 5: %d %v", st, res)
	}
	if st, res := a.call(t, "PUT", "/v1/cells/c/snapshot?upto=5", "state5"); st != 200 {
		t.Fatalf("the same snapshot again: %d %v", st, res)
	}
	st, res := a.call(t, "PUT", "/v1/cells/c/snapshot?upto=5", "other")
	wantErr(t, st, res, 400, errcode.CodeBadRequest)
	got = send(t, "GET", a.srv.URL+"/v1/cells/c/snapshot", "")
	if got.status != 200 || got.body["raw"] != "state5" || got.hdr.Get(HeaderSnapshotPos) != "5" || got.hdr.Get(HeaderSnapshotEpoch) != "1" {
		t.Fatalf("GET newest snapshot: %+v", got)
	}
	st, res = a.call(t, "GET", "/v1/cells/c/records?after=5", "")
	if recs := res["records"].([]any); st != 200 || len(recs) != 1 || recs[0].(map[string]any)["pos"] != 6.0 {
		t.Fatalf("read after the snapshot: %d %v", st, res)
	}
}

// Through a fleet, a snapshot is written by the holder.
func TestSnapshotForwardedToHolder(t *testing.T) {
	m := fakes3.NewMem()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	b := startFleetNode(t, m.Client("b"), "b", testSecret, "", APIConfig{})
	hold(t, b, "c", "one")
	got := send(t, "PUT", a.srv.URL+"/v1/cells/c/snapshot?upto=1", "state")
	if got.status != 200 || got.body["pos"] != 1.0 || got.hdr.Get(HeaderNode) != "b" {
		t.Fatalf("snapshot through a: %+v", got)
	}
	if a.d.held("c") != nil {
		t.Fatal("a claimed the cell b holds")
	}
}
