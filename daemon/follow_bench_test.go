package daemon

import (
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/fakes3"
)

// BenchmarkWaitingReadWakeup is the wake-up latency of a read waiting on
// the holder (?wait=): from the moment the append's answer reaches its
// client to the moment the waiting read's answer reaches its own (0 when
// the read's came first), as p50 and p99 over b.N appends; the store is
// in memory, so this is deed's own share.
func BenchmarkWaitingReadWakeup(b *testing.B) {
	m := fakes3.NewMem()
	a := startTestDaemon(b, m.Client("a"), "a", APIConfig{})
	post := func() time.Time {
		resp, err := http.Post(a.srv.URL+"/v1/cells/c/append", "application/octet-stream", strings.NewReader("x"))
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("append: %v %v", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return time.Now()
	}
	post()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		done := make(chan time.Time, 1)
		go func() {
			resp, err := http.Get(a.srv.URL + "/v1/cells/c/records?wait=10s&after=" + strconv.Itoa(i+1))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			done <- time.Now()
		}()
		for a.d.waiting.Load() == 0 {
			time.Sleep(50 * time.Microsecond)
		}
		time.Sleep(time.Millisecond) // past its first read, asleep on the log
		acked := post()
		lat = append(lat, max(0, (<-done).Sub(acked)))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
