package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/errcode"
)

// `deed run --idle-release 2s`: a cell nobody uses for 2 s is sealed and
// released (deed show says so, and the metric counts it); the next append
// claims it again, and both records are read back.
func TestE2EIdleCellGoesHome(t *testing.T) {
	c := newE2ECluster(t)
	_, a := c.daemon(t, "node-a", "--idle-release", "2s")
	if st, body := post(t, a+"/v1/cells/idle/append", "one"); st != 200 {
		t.Fatalf("append: %d %s", st, body)
	}
	show := func() map[string]any {
		st, out := c.cli(t, "show", "idle", "--json")
		var v map[string]any
		if st != 0 || json.Unmarshal([]byte(out), &v) != nil {
			t.Fatalf("deed show: exit %d: %s", st, out)
		}
		return v
	}
	if v := show(); v["node"] != "node-a" || v["released"] != false {
		t.Fatalf("right after the append: %v, want held by node-a", v)
	}
	start := time.Now()
	for show()["released"] != true {
		if time.Since(start) > 15*time.Second {
			t.Fatalf("not released %v after its last request (--idle-release 2s): %v", time.Since(start), show())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("released %v after the append", time.Since(start).Round(100*time.Millisecond))
	if n := metricValue(t, a, `deed_cells_released_total{reason="idle"}`); n != 1 {
		t.Fatalf(`deed_cells_released_total{reason="idle"} = %d, want 1`, n)
	}
	if n := metricValue(t, a, "deed_cells_held"); n != 0 {
		t.Fatalf("deed_cells_held = %d after the idle release, want 0", n)
	}
	if st, body := post(t, a+"/v1/cells/idle/append", "two"); st != 200 || !strings.Contains(body, `"epoch":2`) {
		t.Fatalf("append after the idle release: %d %s, want it acknowledged at epoch 2", st, body)
	}
	st, body := get(t, a+"/v1/cells/idle/records?barrier=true")
	if st != 200 || !strings.Contains(body, b64("one")) || !strings.Contains(body, b64("two")) {
		t.Fatalf("records after the re-claim: %d %s", st, body)
	}
	if v := show(); v["node"] != "node-a" || v["epoch"] != 2.0 {
		t.Fatalf("after the re-claim: %v, want held by node-a at epoch 2", v)
	}
}

// A negative --idle-release or --max-cells, or an idle release under a
// second, is refused with DEED-E040 before anything is written.
func TestRunRefusesBadIdleFlags(t *testing.T) {
	e := newCellEnv(t)
	for _, flags := range [][]string{{"--idle-release", "-1s"}, {"--idle-release", "500ms"}, {"--max-cells", "-1"}} {
		t.Run(strings.Join(flags, " "), func(t *testing.T) {
			args := append([]string{"run", "--node", "n", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "d")}, flags...)
			wantExit(t, e.run(t, args...), 2, errcode.CodeBadRequest)
		})
	}
	if keys := e.keys(t); len(keys) != 0 {
		t.Fatalf("refused commands wrote %v", keys)
	}
}
