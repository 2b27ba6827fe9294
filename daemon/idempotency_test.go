package daemon

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

// Idempotency-Key on an append: a retry answers the first (same epoch,
// txid, pos, ts) with Idempotent-Replayed, writes nothing; the same key
// with another body is DEED-E043, 422, applied no; a bad key is refused.
func TestAppendIdempotencyKey(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	url := a.srv.URL + "/v1/cells/c1/append"
	first := send(t, "POST", url, "one", HeaderIdempotencyKey, "k-1")
	if first.status != 200 || first.hdr.Get(HeaderReplayed) != "" || first.body["ts"] == 0.0 {
		t.Fatalf("first: %+v", first)
	}
	again := send(t, "POST", url, "one", HeaderIdempotencyKey, "k-1")
	if again.status != 200 || again.hdr.Get(HeaderReplayed) != "true" || fmt.Sprint(again.body) != fmt.Sprint(first.body) {
		t.Fatalf("replay: %+v, want %v", again, first.body)
	}
	other := send(t, "POST", url, "two", HeaderIdempotencyKey, "k-1")
	if other.status != 422 || other.code() != string(errcode.CodeKeyReused) || other.body["applied"] != "no" {
		t.Fatalf("other body: %+v", other)
	}
	for _, k := range []string{strings.Repeat("x", 256), "a\tb", "é"} {
		if got := send(t, "POST", url, "one", HeaderIdempotencyKey, k); got.status != 400 || got.code() != string(errcode.CodeBadRequest) {
			t.Fatalf("key %q: %+v", k, got)
		}
	}
	st, res := a.call(t, "GET", "/v1/cells/c1/records", "")
	recs := res["records"].([]any)
	if st != 200 || len(recs) != 1 || recs[0].(map[string]any)["ts"] != first.body["ts"] {
		t.Fatalf("log after replays: %d %v", st, res)
	}
	// After a change of owner (release; b claims), b answers the key.
	if st, _ := a.call(t, "POST", "/v1/cells/c1/release", ""); st != 200 {
		t.Fatal(st)
	}
	b := startTestDaemon(t, m.Client("b"), "b", APIConfig{})
	got := send(t, "POST", b.srv.URL+"/v1/cells/c1/append", "one", HeaderIdempotencyKey, "k-1")
	if got.status != 200 || got.hdr.Get(HeaderReplayed) != "true" || got.body["pos"] != first.body["pos"] || got.body["epoch"] != first.body["epoch"] {
		t.Fatalf("replay on the new owner: %+v, want %v", got, first.body)
	}
}

// ?match_pos: 412 DEED-E044 naming next_pos, applied no; with a key, a
// replay answers its first outcome.
func TestAppendMatchPos(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	url := a.srv.URL + "/v1/cells/c1/append"
	if got := send(t, "POST", url+"?match_pos=1", "a"); got.status != 200 || got.body["pos"] != 1.0 {
		t.Fatalf("match 1: %+v", got)
	}
	got := send(t, "POST", url+"?match_pos=1", "b")
	if got.status != 412 || got.code() != string(errcode.CodePosMismatch) || got.body["next_pos"] != 2.0 || got.body["applied"] != "no" {
		t.Fatalf("mismatch: %+v", got)
	}
	for _, q := range []string{"0", "x", ""} {
		if got := send(t, "POST", url+"?match_pos="+q, "b"); got.status != 400 {
			t.Fatalf("match_pos=%q: %+v", q, got)
		}
	}
	k1 := send(t, "POST", url+"?match_pos=2", "c", HeaderIdempotencyKey, "c")
	k2 := send(t, "POST", url+"?match_pos=2", "c", HeaderIdempotencyKey, "c")
	if k1.status != 200 || k2.status != 200 || k2.hdr.Get(HeaderReplayed) != "true" || k2.body["pos"] != 2.0 {
		t.Fatalf("keyed match: %+v then %+v", k1, k2)
	}
}

// POST /batch appends its records as one transaction at contiguous
// positions; bad batches are refused before anything is written.
func TestAppendBatchAPI(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	url := a.srv.URL + "/v1/cells/c1/batch"
	body := func(recs ...string) string {
		var parts []string
		for _, r := range recs {
			parts = append(parts, fmt.Sprintf(`{"data":%q}`, base64.StdEncoding.EncodeToString([]byte(r))))
		}
		return `{"records":[` + strings.Join(parts, ",") + `]}`
	}
	got := send(t, "POST", url, body("a", "b", "c"), HeaderIdempotencyKey, "b1")
	if got.status != 200 || got.body["first_pos"] != 1.0 || got.body["last_pos"] != 3.0 || got.body["txid"] == nil || got.body["ts"] == nil {
		t.Fatalf("batch: %+v", got)
	}
	again := send(t, "POST", url, body("a", "b", "c"), HeaderIdempotencyKey, "b1")
	if again.status != 200 || again.hdr.Get(HeaderReplayed) != "true" || fmt.Sprint(again.body) != fmt.Sprint(got.body) {
		t.Fatalf("batch replay: %+v", again)
	}
	if got := send(t, "POST", url+"?match_pos=3", body("d")); got.status != 412 || got.body["next_pos"] != 4.0 {
		t.Fatalf("batch mismatch: %+v", got)
	}
	many := make([]string, 4097)
	for i := range many {
		many[i] = "x"
	}
	for name, b := range map[string]string{
		"empty":         `{"records":[]}`,
		"not json":      `records`,
		"unknown field": `{"records":[{"data":"eA=="}],"x":1}`,
		"empty record":  `{"records":[{"data":""}]}`,
		"bad base64":    `{"records":[{"data":"!!"}]}`,
		"too many":      body(many...),
		"trailing":      body("a") + `{}`,
	} {
		if got := send(t, "POST", url, b); got.status != 400 || got.code() != string(errcode.CodeBadRequest) {
			t.Errorf("%s: %+v", name, got)
		}
	}
	st, res := a.call(t, "GET", "/v1/cells/c1/records", "")
	recs := res["records"].([]any)
	if st != 200 || len(recs) != 3 || recs[0].(map[string]any)["txid"] != recs[2].(map[string]any)["txid"] {
		t.Fatalf("log: %d %v", st, res)
	}
}

// A forward carries the key and match_pos to the holder.
func TestForwardCarriesKeyAndMatch(t *testing.T) {
	m := fakes3.NewMem()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	b := startFleetNode(t, m.Client("b"), "b", testSecret, "", APIConfig{})
	hold(t, b, "c", "one")
	first := send(t, "POST", a.srv.URL+"/v1/cells/c/append", "two", HeaderIdempotencyKey, "fk")
	again := send(t, "POST", a.srv.URL+"/v1/cells/c/append", "two", HeaderIdempotencyKey, "fk")
	if first.status != 200 || again.hdr.Get(HeaderReplayed) != "true" || again.hdr.Get(headerForwardedBy) != "a" || again.body["pos"] != first.body["pos"] {
		t.Fatalf("keyed forward: %+v then %+v", first, again)
	}
	if got := send(t, "POST", a.srv.URL+"/v1/cells/c/append?match_pos=1", "x"); got.status != 412 || got.body["next_pos"] != 3.0 {
		t.Fatalf("conditional forward: %+v", got)
	}
}
