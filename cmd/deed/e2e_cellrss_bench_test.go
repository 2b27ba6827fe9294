package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deedkit/deed/fakes3"
)

// rssCells is BenchmarkE2EIdleCellRSS's N: 50,000 acquisitions through
// one daemon take 1.5-2 minutes on 2 busy cores (a smaller N for a quicker
// look).
var rssCells = flag.Int("rss-cells", 50000, "cells BenchmarkE2EIdleCellRSS acquires (the slope starts at a tenth of it)")

// BenchmarkE2EIdleCellRSS measures the memory the real `deed run` process
// spends per held idle cell: a fresh daemon (built without -race, its
// runtime's defaults: GOGC=100, no memory limit) against `deed fakes3` on
// loopback (in memory) acquires N cells through its HTTP API, 16 appends
// in flight, one record per cell, then goes idle. Issue 15's target: at
// most 1 KiB per cell at N = 50,000. Its VmRSS is read from /proc before the
// first append and after a settle time. Reported:
//
//   - RSS-B/cell: (RSS(N) − RSS(0)) / N at N = 50,000 (-rss-cells).
//   - slope-B/cell: the growth from N/10 to N over the cells between, each
//     in its own process, so the fixed cost of the
//     first requests (connection buffers, TLS-free but still HTTP state,
//     metric series) cancels out.
//   - heap-B/cell: the growth of the Go heap in use (go_memstats_heap_inuse_bytes
//     from its /metrics) over N; RSS on top of it is garbage
//     not yet collected, memory not yet returned to the OS, and stacks.
//
// It needs /proc (Linux) and runs for about three minutes (it logs each
// N's acquisition rate, which stays flat as the cells grow); it is not
// part of make test.
func BenchmarkE2EIdleCellRSS(b *testing.B) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		b.Skip("reads VmRSS from /proc: Linux only")
	}
	large := *rssCells
	small := large / 10
	type sample struct{ rss0, rss, heap0, heap int64 }
	got := map[int]sample{}
	ok := testing.RunTests(func(string, string) (bool, error) { return true, nil }, []testing.InternalTest{{
		Name: "idle-cell-rss",
		F: func(t *testing.T) {
			if len(got) > 0 {
				return // ran already: the metrics do not depend on b.N
			}
			for _, n := range []int{small, large} {
				// A subtest each, so each N's processes end before the next.
				t.Run(fmt.Sprint(n), func(t *testing.T) {
					var s sample
					s.rss0, s.rss, s.heap0, s.heap = idleCellsRSS(t, n)
					got[n] = s
					t.Logf("N=%d: RSS %d → %d KiB, heap in use %d → %d KiB", n, s.rss0>>10, s.rss>>10, s.heap0>>10, s.heap>>10)
				})
			}
		},
	}})
	if !ok || len(got) != 2 {
		b.Fatal("idle cell runs failed (see above)")
	}
	l, s := got[large], got[small]
	b.ReportMetric(float64(l.rss-l.rss0)/float64(large), "RSS-B/cell")
	b.ReportMetric(float64((l.rss-l.rss0)-(s.rss-s.rss0))/float64(large-small), "slope-B/cell")
	b.ReportMetric(float64(l.heap-l.heap0)/float64(large), "heap-B/cell")
}

// idleCellsRSS starts a store and a daemon, reads the daemon's RSS and heap
// in use, has it acquire n cells (one append each) and reads them again
// once it is idle.
func idleCellsRSS(t *testing.T, n int) (rss0, rss1, heap0, heap1 int64) {
	bin := plainDeedBinary(t)
	// The store keeps its objects in memory and checks no signatures: what
	// is measured is the daemon, and a store that fsyncs every PUT (--dir)
	// and verifies every signature would make 50,000 acquisitions take
	// several minutes on a small machine. The daemon signs its requests
	// as it would for any store.
	s3 := waitS3(t, startCmd(t, exec.Command(bin, "fakes3", "--listen", anyPort, "--bucket", "rss", "--no-auth"), "deed fakes3"))
	creds := fakes3.Credentials{AccessKeyID: "rss", SecretAccessKey: "rss"}
	// A long TTL: on a loaded machine the burst must not starve the node
	// lease's renewals into a fence (what is measured is memory).
	cmd := exec.Command(bin, "run", "--node", "rss-node", "--listen", anyPort, "--ttl", "30s")
	cmd.Env = append(os.Environ(), "DEED_BUCKET=s3://rss/test", "DEED_ENDPOINT=http://"+s3,
		"AWS_ACCESS_KEY_ID="+creds.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+creds.SecretAccessKey, "AWS_REGION=us-east-1")
	p := startCmd(t, cmd, "deed run")
	base := waitNode(t, p, "rss-node")
	settle := func() (int64, int64) {
		// Writers that went idle exit; the daemon returns the burst's
		// free memory to the OS within two trim intervals of going idle.
		time.Sleep(2*trimEvery + time.Second)
		return procRSS(t, p.cmd.Process.Pid), heapInUse(t, base)
	}
	rss0, heap0 = settle()

	const inFlight = 16
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: inFlight}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, inFlight)
	start := time.Now()
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				url := fmt.Sprintf("%s/v1/cells/idle-%06d/append", base, i)
				req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader("x"))
				if err != nil {
					errs <- err
					return
				}
				resp, err := client.Do(req)
				if err != nil {
					errs <- fmt.Errorf("append %d: %w", i, err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs <- fmt.Errorf("append %d: %d %s", i, resp.StatusCode, body)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("N=%d: acquired in %v (%.0f cells/s)", n, took.Round(time.Millisecond), float64(n)/took.Seconds())
	rss1, heap1 = settle()
	if held := metricValue(t, base, "deed_cells_held"); held != int64(n) {
		t.Fatalf("deed_cells_held %d, want %d", held, n)
	}
	return rss0, rss1, heap0, heap1
}

// procRSS is pid's resident set size in bytes (VmRSS).
func procRSS(t *testing.T, pid int) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

func heapInUse(t *testing.T, base string) int64 {
	return metricValue(t, base, "go_memstats_heap_inuse_bytes")
}

// metricValue reads one unlabelled series from the daemon's /metrics.
func metricValue(t *testing.T, base, name string) int64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int64(f)
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

var (
	plainOnce sync.Once
	plainPath string
	plainErr  error
)

// plainDeedBinary builds cmd/deed once per run without -race (deedBinary's
// race detector would multiply the memory measured).
func plainDeedBinary(t *testing.T) string {
	t.Helper()
	plainOnce.Do(func() {
		dir, err := os.MkdirTemp("", "deed-e2e-plain")
		if err != nil {
			plainErr = err
			return
		}
		plainPath = filepath.Join(dir, "deed")
		out, err := exec.Command("go", "build", "-o", plainPath, ".").CombinedOutput()
		if err != nil {
			plainErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if plainErr != nil {
		t.Fatal(plainErr)
	}
	return plainPath
}
