package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/fakes3"
)

// BenchmarkRetentionIdleSweep: the store requests of the retention sweep
// over 100 held cells with one record each where nothing has expired
// (--retention 1h), counted on cells/ keys: first-sweep/cell is what a
// lease's first sweep learns (the trim point and the first record),
// requests/op every later sweep of all 100 cells (target 0).
func BenchmarkRetentionIdleSweep(b *testing.B) {
	const cells = 100
	m := fakes3.NewMem()
	cb := &cellRequests{Bucket: m.Client("a")}
	a := startRetentionDaemon(b, cb, time.Hour)
	for i := range cells {
		resp, err := http.Post(a.srv.URL+fmt.Sprintf("/v1/cells/c%d/append", i), "application/octet-stream", strings.NewReader("x"))
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("append: %s", resp.Status)
		}
	}
	ctx := b.Context()
	n0 := cb.n.Load()
	a.d.retentionSweep(ctx)
	first := cb.n.Load() - n0
	b.ResetTimer()
	n0 = cb.n.Load()
	for range b.N {
		a.d.retentionSweep(ctx)
	}
	b.ReportMetric(float64(cb.n.Load()-n0)/float64(b.N), "requests/op")
	b.ReportMetric(float64(first)/cells, "first-sweep/cell")
}
