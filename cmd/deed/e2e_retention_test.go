package main

import (
	"strings"
	"testing"
	"time"
)

// `deed run --retention 3s`: records older than 3 s stop being served
// (410 DEED-E046 naming the first position served) while a younger one
// still is; deed trim asked for a lower point answers the one in effect.
func TestE2ERetentionTrimsExpiredRecords(t *testing.T) {
	c := newE2ECluster(t)
	_, a := c.daemon(t, "node-a", "--retention", "3s")
	for _, rec := range []string{"old-1", "old-2"} {
		if st, body := post(t, a+"/v1/cells/ret/append", rec); st != 200 {
			t.Fatalf("append: %d %s", st, body)
		}
	}
	time.Sleep(3300 * time.Millisecond)
	if st, body := post(t, a+"/v1/cells/ret/append", "new"); st != 200 {
		t.Fatalf("append: %d %s", st, body)
	}
	start := time.Now()
	for {
		st, body := get(t, a+"/v1/cells/ret/records?after=0")
		if st == 410 {
			if !strings.Contains(body, `"code":"DEED-E046"`) || !strings.Contains(body, `"first_pos":3`) || !strings.Contains(body, `"applied":"no"`) {
				t.Fatalf("read below the retention: %d %s, want DEED-E046 with first_pos 3", st, body)
			}
			break
		}
		if time.Since(start) > 2500*time.Millisecond {
			t.Fatalf("records older than --retention 3s still served after %v: %d %s", time.Since(start), st, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st, body := get(t, a+"/v1/cells/ret/records?after=2"); st != 200 || !strings.Contains(body, b64("new")) {
		t.Fatalf("read of the record younger than the retention: %d %s", st, body)
	}
	st, out := c.cli(t, "trim", "ret", "--before", "1", "--addr", a)
	if st != 0 || !strings.Contains(out, "trim ret before 3 (epoch 1)") {
		t.Fatalf("deed trim --before 1: exit %d: %s, want the point in effect, 3", st, out)
	}
}
