package main

import (
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
)

// A node lease that is not one (not JSON, missing fields, far too large, a
// TTL no node runs with) is listed as "corrupt" with DEED-E030, never
// skipped or taken for a healthy node.
func TestNodesFlagsCorruptLeases(t *testing.T) {
	e := newCellEnv(t)
	e.putNodeLease(t, "ghost", time.Second, false)
	for node, body := range map[string]string{
		"notjson": "{",
		"empty":   "{}",
		"huge":    strings.Repeat(" ", owner.MaxRecordLen+1),
		"forever": `{"node":"forever","incarnation":"i","ttl_ms":9223372036854775807,"seq":1}`,
	} {
		if _, err := e.b.Put(t.Context(), owner.NodeKey(node), []byte(body), bucket.None); err != nil {
			t.Fatal(err)
		}
	}
	r := e.run(t, "nodes", "--ttl", "1s", "--json")
	wantExit(t, r, 0, "")
	rows := map[string]nodeRow{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		row := decode[nodeRow](t, line)
		rows[row.Node] = row
	}
	if len(rows) != 5 || rows["ghost"].State != "unknown" || rows["ghost"].Code != "" {
		t.Fatalf("rows: %+v", rows)
	}
	for _, node := range []string{"notjson", "empty", "huge", "forever"} {
		row := rows[node]
		if row.State != "corrupt" || row.Code != errcode.CodeCorruptOwner || !strings.Contains(row.Error, owner.NodeKey(node)) || row.TTLMS != 0 {
			t.Errorf("%s: %+v, want state corrupt, code DEED-E030 and an error naming its key", node, row)
		}
	}
	r = e.run(t, "nodes", "--ttl", "1s")
	if !strings.Contains(r.stdout, "notjson  corrupt") || !strings.Contains(r.stdout, "notjson: DEED-E030 corrupt node lease") {
		t.Errorf("text:\n%s", r.stdout)
	}
}
