package daemon

import (
	"testing"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

// GET tail answers the holder's end of the log: the next position, its
// epoch and node, and the newest timestamp; a node without a fleet that
// does not hold the cell refuses, naming the holder; a holder fenced by a
// takeover does not answer its stale end (the barrier catches it).
func TestTailIsTheHoldersLinearizable(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	b := startTestDaemon(t, m.Client("b"), "b", APIConfig{})
	var ts float64
	for _, rec := range []string{"one", "two"} {
		st, res := a.call(t, "POST", "/v1/cells/c/append", rec)
		if st != 200 {
			t.Fatalf("append: %d %v", st, res)
		}
		ts = res["ts"].(float64)
	}
	st, res := a.call(t, "GET", "/v1/cells/c/tail", "")
	if st != 200 || res["cell"] != "c" || res["next_pos"] != 3.0 || res["epoch"] != 1.0 || res["node"] != "a" || res["ts"] != ts {
		t.Fatalf("tail on the holder: %d %v (last ts %v)", st, res, ts)
	}
	st, res = b.call(t, "GET", "/v1/cells/c/tail", "")
	wantErr(t, st, res, 409, errcode.CodeNotHolder)
	if st, res = b.call(t, "POST", "/v1/cells/c/claim?force=true", ""); st != 200 {
		t.Fatalf("forced claim on b: %d %v", st, res)
	}
	if st, res = b.call(t, "POST", "/v1/cells/c/append", "three"); st != 200 {
		t.Fatalf("append on b: %d %v", st, res)
	}
	st, res = a.call(t, "GET", "/v1/cells/c/tail", "")
	if st == 200 {
		t.Fatalf("the fenced holder answered its stale tail: %v", res)
	}
	st, res = b.call(t, "GET", "/v1/cells/c/tail", "")
	if st != 200 || res["next_pos"] != 4.0 || res["epoch"] != 2.0 || res["node"] != "b" {
		t.Fatalf("tail on the new holder: %d %v", st, res)
	}
	st, res = a.call(t, "GET", "/v1/cells/bad%21/tail", "")
	wantErr(t, st, res, 400, errcode.CodeInvalidName)
}

// Through a fleet, any node's tail is the holder's, forwarded.
func TestTailForwardedToHolder(t *testing.T) {
	m := fakes3.NewMem()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	b := startFleetNode(t, m.Client("b"), "b", testSecret, "", APIConfig{})
	hold(t, b, "c", "one")
	got := send(t, "GET", a.srv.URL+"/v1/cells/c/tail", "")
	if got.status != 200 || got.body["next_pos"] != 2.0 || got.body["node"] != "b" || got.hdr.Get(headerForwardedBy) != "a" {
		t.Fatalf("tail through a: %+v", got)
	}
	if a.d.held("c") != nil {
		t.Fatal("a claimed the cell b holds")
	}
}
