package daemon

import (
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/fakes3"
)

// BenchmarkSSEWakeup is the wake-up latency of an event stream: from the
// moment an append's answer (on the holder) reaches its client to the
// moment the record's event reaches the stream's (0 when the event came
// first), as p50 and p99 over b.N appends, for a stream on the holder
// (the baseline) and for one on another node of the fleet, whose loop's
// waiting read is forwarded to the holder over real HTTP. The store is in
// memory: this is deed's own share.
func BenchmarkSSEWakeup(b *testing.B) {
	for _, via := range []string{"holder", "peer"} {
		b.Run(via, func(b *testing.B) {
			m := fakes3.NewMem()
			h := startBenchFleetNode(b, m, "h")
			p := startBenchFleetNode(b, m, "p")
			for len(h.d.others()) == 0 || len(p.d.others()) == 0 {
				time.Sleep(10 * time.Millisecond)
			}
			benchPost(b, h.srv.URL+"/v1/cells/c/claim", "")
			benchPost(b, h.srv.URL+"/v1/cells/c/append", "x")
			url := h.srv.URL
			if via == "peer" {
				url = p.srv.URL
			}
			s, _ := openStream(b, url+"/v1/cells/c/records?follow=true")
			s.record(b)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				// The stream's read is waiting on the holder's log.
				for h.d.waiting.Load() == 0 && via == "peer" {
					time.Sleep(50 * time.Microsecond)
				}
				time.Sleep(time.Millisecond)
				acked := benchPost(b, h.srv.URL+"/v1/cells/c/append", "x")
				rec := s.record(b)
				got := time.Now()
				if rec.Pos != uint64(i)+2 {
					b.Fatalf("event for %d, want %d", rec.Pos, i+2)
				}
				lat = append(lat, max(0, got.Sub(acked)))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkSSEFollowersMemory opens 1,000 event streams on one node (or,
// the baseline, 1,000 reads waiting with ?wait=) and reports the heap
// and goroutines each adds. Client and server share the process, so the
// figures include the client's side of each connection (its transport's
// two goroutines and buffers, and the test's reader); srv-goroutines is
// the server's share alone, from the goroutines whose stacks are in the
// stream's handler.
func BenchmarkSSEFollowersMemory(b *testing.B) {
	const n = 1000
	for _, kind := range []string{"waiting-read", "event-stream"} {
		b.Run(kind, func(b *testing.B) {
			for range b.N {
				m := fakes3.NewMem()
				a := startTestDaemon(b, m.Client("a"), "a", APIConfig{MaxFollowers: 2 * n, MaxWaitingReads: 2 * n})
				benchPost(b, a.srv.URL+"/v1/cells/c/append", "x")
				tr := &http.Transport{MaxIdleConnsPerHost: 2 * n}
				hc := &http.Client{Transport: tr}
				before, g0 := heapNow()
				var mu sync.Mutex
				var bodies []io.ReadCloser
				for range n {
					req, _ := http.NewRequest("GET", a.srv.URL+"/v1/cells/c/records?after=1&wait=60s", nil)
					if kind == "event-stream" {
						req, _ = http.NewRequest("GET", a.srv.URL+"/v1/cells/c/records?after=1&follow=true", nil)
						req.Header.Set("Accept", "text/event-stream")
					}
					done := make(chan struct{})
					go func() {
						defer close(done)
						resp, err := hc.Do(req)
						if err != nil || resp.StatusCode != 200 {
							b.Errorf("follower: %v %v", resp, err)
							return
						}
						mu.Lock()
						bodies = append(bodies, resp.Body)
						mu.Unlock()
					}()
					if kind == "event-stream" {
						<-done // the answer's headers come at once
					}
				}
				for a.d.followers.Load()+a.d.waiting.Load() < n {
					time.Sleep(time.Millisecond)
				}
				time.Sleep(100 * time.Millisecond)
				after, g1 := heapNow()
				srvG := countStacks("followStream") + countStacks("readWaiting")
				b.ReportMetric(float64(after-before)/n, "heap-B/follower")
				b.ReportMetric(float64(g1-g0)/n, "goroutines/follower")
				b.ReportMetric(float64(srvG)/n, "handler-goroutines/follower")
				mu.Lock()
				defer mu.Unlock()
				for _, bd := range bodies {
					bd.Close()
				}
				a.d.EndStreams()
				benchPost(b, a.srv.URL+"/v1/cells/c/append", "y") // answers the waiting reads
				tr.CloseIdleConnections()
			}
		})
	}
}

func heapNow() (uint64, int) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, runtime.NumGoroutine()
}

// countStacks counts the goroutines whose stack names fn.
func countStacks(fn string) int {
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	c := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "."+fn+"(") {
			c++
		}
	}
	return c
}

func benchPost(b testing.TB, url, body string) time.Time {
	resp, err := http.Post(url, "application/octet-stream", strings.NewReader(body))
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("POST %s: %v %v", url, resp, err)
	}
	var v client.AppendResult
	_ = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	return time.Now()
}

// startBenchFleetNode is startFleetNode for a benchmark.
func startBenchFleetNode(b *testing.B, m *fakes3.Mem, node string) *fleetNode {
	return startFleetNode(b, m.Client(node), node, testSecret, "", APIConfig{})
}
