package daemon

// Benchmarks of the node daemon: what one held cell costs in memory and in
// S3 requests, and what the daemon adds on top of the S3 calls it makes.
// Run them with `make bench`; see docs/performance.md.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/benchtest"
	"github.com/deedkit/deed/fakes3/s3test"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// benchDaemon opens a daemon on b with the default TTL, without the probe.
func benchDaemon(t testing.TB, b bucket.Bucket) *Daemon { return benchNode(t, b, "bench") }

// benchNode is benchDaemon with a node id.
func benchNode(t testing.TB, b bucket.Bucket, node string) *Daemon {
	t.Helper()
	d, err := Open(context.Background(), Config{Node: node, Advertise: "http://" + node, TTL: owner.DefaultTTL},
		b, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func closeDaemon(t testing.TB, d *Daemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := d.Close(ctx); err != nil {
		t.Error(err)
	}
}

// nullStore is a bucket that keeps nothing: every key reads as missing,
// but a cell's ownership record, which reads as epoch 1 held by node
// "bench" (what the benchmark's first claim of the cell wrote: a log's
// open reads it again); every write succeeds, every listing is empty.
// Claims, log opens and node-lease renewals all work against it, and it
// holds no memory per key, so the heap a daemon grows while acquiring cells
// on it is the daemon's own per-cell state and nothing else.
type nullStore struct{}

func (nullStore) Get(_ context.Context, key string, _ int64) (bucket.Object, error) {
	if strings.HasPrefix(key, "cells/") && strings.HasSuffix(key, "/own.json") {
		body := []byte(`{"node":"bench","epoch":1,"nonce":"0","at_ms":1}`)
		return bucket.Object{Key: key, ETag: `"0"`, Body: body}, nil
	}
	return bucket.Object{}, bucket.Classify("get", key, bucket.None, 404, "NoSuchKey", nil)
}

func (nullStore) Head(_ context.Context, key string) (bucket.Info, error) {
	return bucket.Info{}, bucket.Classify("head", key, bucket.None, 404, "NotFound", nil)
}

func (nullStore) Put(context.Context, string, []byte, bucket.Condition) (string, error) {
	return `"0"`, nil
}

func (nullStore) Delete(context.Context, string, bucket.Condition) error { return nil }

func (nullStore) List(context.Context, bucket.ListInput) (bucket.ListPage, error) {
	return bucket.ListPage{}, nil
}

// liveBytes is the heap in use plus goroutine stacks, after a full GC.
func liveBytes() (heap, stacks int64, goroutines int) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc), int64(ms.StackInuse), runtime.NumGoroutine()
}

// BenchmarkIdleCellMemory: the memory one node spends per held, idle cell
// with 100,000 cells held — its lease (owner.Lease), its open log
// (replication.Log), the daemon's entry for it and every goroutine kept
// for it — measured as the growth of the live heap plus goroutine stacks
// while the daemon acquires the cells (claim, open the log, one append).
// The store keeps nothing (nullStore), so none of it is the store's.
// Target: ≤ 4 KiB per cell.
func BenchmarkIdleCellMemory(b *testing.B) {
	const cells = 100000
	for i := 0; i < b.N; i++ {
		ctx := context.Background()
		d := benchDaemon(b, nullStore{})
		heap0, stack0, g0 := liveBytes()
		for j := range cells {
			// The name is made here: the cell's state holds it.
			c, err := d.acquire(ctx, fmt.Sprintf("cell-%06d", j), false)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.log.Append(ctx, c.lease, []byte("x")); err != nil {
				b.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond) // let writers that go idle exit
		heap1, stack1, g1 := liveBytes()
		if n := d.countHeld(); n != cells {
			b.Fatalf("%d cells held, want %d", n, cells)
		}
		b.ReportMetric(float64(heap1-heap0)/cells, "heap-B/cell")
		b.ReportMetric(float64(stack1-stack0)/cells, "stack-B/cell")
		b.ReportMetric(float64(heap1+stack1-heap0-stack0)/cells, "B/cell")
		b.ReportMetric(float64(g1-g0)/cells, "goroutines/cell")
		b.StopTimer()
		closeDaemon(b, d)
		b.StartTimer()
	}
}

// BenchmarkSteadyStateRequests: S3 requests per held cell per hour when
// nothing happens. A fleet of daemons holds N and then 2N idle cells (each
// claimed, opened and appended to once, spread over the nodes) for one
// virtual hour at 20 ms per request; the requests per cell per hour are
// the difference over N. Target: 0 — the node-lease renewals and the peer
// LIST, every TTL/3, do not grow with the cells. Also reported: each
// node's fixed requests per hour.
func BenchmarkSteadyStateRequests(b *testing.B) {
	const n = 500
	rtt := 20 * time.Millisecond
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			benchtest.Bubble(b, func(t *testing.T) {
				perHour := map[int]fakes3.Counts{}
				cellReqs := map[int]int64{}
				for i := 0; i < b.N; i++ {
					for _, cells := range []int{n, 2 * n} {
						perHour[cells], cellReqs[cells] = idleHour(t, nodes, cells, rtt)
					}
				}
				small := perHour[n]
				// Counted on cells' keys only: how often a node reads a
				// peer's lease depends on the phase of their renewals,
				// which the setup of N or 2N cells shifts.
				perCell := float64(cellReqs[2*n]-cellReqs[n]) / n
				per := func(v int64) float64 { return float64(v) / float64(nodes) }
				b.ReportMetric(perCell, "req/cell/hour")
				b.ReportMetric((float64(small.Total())-perCell*n)/float64(nodes), "req/node/hour")
				b.ReportMetric(per(small.Put), "PUT/node/hour")
				b.ReportMetric(per(small.List), "LIST/node/hour")
				b.ReportMetric(per(small.Get+small.Head), "GET+HEAD/node/hour")
			})
		})
	}
}

// idleHour holds cells idle cells on nodes daemons for one hour and returns
// the requests sent meanwhile, and how many of them were on cells' keys.
func idleHour(t testing.TB, nodes, cells int, rtt time.Duration) (fakes3.Counts, int64) {
	ctx := context.Background()
	m := fakes3.NewMem()
	m.Inject(fakes3.Rule{Latency: rtt})
	var onCells atomic.Int64
	m.Inject(fakes3.Rule{Match: func(_ fakes3.Op, key string) bool {
		if strings.HasPrefix(key, "cells/") {
			onCells.Add(1)
		}
		return false // counts, faults nothing
	}})
	ds := make([]*Daemon, nodes)
	for i := range ds {
		ds[i] = benchNode(t, m, fmt.Sprintf("node-%d", i))
		defer closeDaemon(t, ds[i])
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for j := range cells {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c, err := ds[j%nodes].acquire(ctx, fmt.Sprintf("cell-%06d", j), false)
			if err == nil {
				_, err = c.log.Append(ctx, c.lease, []byte("x"))
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	time.Sleep(time.Minute) // settle
	before, beforeCells := m.Counts(), onCells.Load()
	time.Sleep(time.Hour)
	got, gotCells := m.Counts().Sub(before), onCells.Load()-beforeCells
	held := 0
	for _, d := range ds {
		if !d.ready() {
			t.Fatalf("node %s not ready after an idle hour", d.cfg.Node)
		}
		held += d.countHeld()
	}
	if held != cells {
		t.Fatalf("after an idle hour: %d cells held, want %d", held, cells)
	}
	return got, gotCells
}

// BenchmarkDaemonOverhead: the time the daemon takes for an operation
// against the in-process HTTP fake, over the time a loop of raw
// aws-sdk-go-v2 calls takes for the same requests to the same server in
// the same process. Both run interleaved, one of each per iteration.
//
//   - append: the daemon's append (one conditional PutObject of a slot
//     file, If-None-Match: *) against a raw PutObject with If-None-Match of
//     a body of the same size to a key of the same shape.
//   - acquire: the daemon claiming a fresh cell and opening its log (PUT
//     own.json If-None-Match, sent without reading it first; LIST the
//     cell's log, GET its first slot) against the same three raw calls.
//   - api-append: the append through the daemon's HTTP API, which adds a
//     loopback HTTP exchange the raw loop does not make.
//
// Each runs against the fake as it is (rtt=0s: the ratio shows deed's
// CPU cost against the SDK's) and with a 20 ms delay before every request
// is served (rtt=20ms: a store at a realistic distance, where the loopback
// HTTP hop of api-append is put in proportion).
//
// daemon/raw is the ratio of the median latencies; daemon/raw-mean the
// ratio of the totals, which a noisy machine moves more. Target:
// daemon/raw ≤ 1.15.
func BenchmarkDaemonOverhead(b *testing.B) {
	rec := make([]byte, 100)
	slotBody, err := replication.Encode(&replication.File{Kind: replication.KindRecords, Epoch: 1, TxID: 1,
		Token: "0123456789abcdef0123456789abcdef", Pos: 1, Records: [][]byte{rec}})
	if err != nil {
		b.Fatal(err)
	}

	for _, rtt := range benchtest.RTTs {
		b.Run(benchtest.Name(rtt), func(b *testing.B) { benchOverhead(b, rtt, rec, slotBody) })
	}
}

func benchOverhead(b *testing.B, rtt time.Duration, rec, slotBody []byte) {
	ctx := context.Background()
	b.Run("append", func(b *testing.B) {
		e := newOverheadEnv(b, rtt)
		c, err := e.d.acquire(ctx, "overhead", false)
		if err != nil {
			b.Fatal(err)
		}
		var tDeed, tRaw pairTimes
		for i := 0; i < b.N; i++ {
			start := time.Now()
			if _, err := c.log.Append(ctx, c.lease, rec); err != nil {
				b.Fatal(err)
			}
			tDeed.add(start)
			start = time.Now()
			e.put(b, fmt.Sprintf("raw/cells/overhead/ltx/e1/%016x.ltx", i+1), slotBody)
			tRaw.add(start)
		}
		reportOverhead(b, tDeed, tRaw, "daemon/raw")
	})

	b.Run("acquire", func(b *testing.B) {
		e := newOverheadEnv(b, rtt)
		own := []byte(`{"node":"bench","epoch":1,"nonce":"0123456789abcdef0123456789abcdef","at_ms":1700000000000}`)
		var tDeed, tRaw pairTimes
		for i := 0; i < b.N; i++ {
			cell := fmt.Sprintf("cell-%d", i)
			start := time.Now()
			if _, err := e.d.acquire(ctx, cell, false); err != nil {
				b.Fatal(err)
			}
			tDeed.add(start)

			start = time.Now()
			key := "raw/cells/" + cell + "/own.json"
			e.put(b, key, own)
			prefix := "raw/cells/" + cell + "/ltx/"
			if _, err := e.raw.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: &e.bkt, Prefix: &prefix}); err != nil {
				b.Fatal(err)
			}
			slot := prefix + "e1/0000000000000001.ltx"
			if _, err := e.raw.GetObject(ctx, &awss3.GetObjectInput{Bucket: &e.bkt, Key: &slot}); err == nil {
				b.Fatal("raw get of a fresh slot succeeded")
			}
			tRaw.add(start)
		}
		reportOverhead(b, tDeed, tRaw, "daemon/raw")
	})

	b.Run("api-append", func(b *testing.B) {
		e := newOverheadEnv(b, rtt)
		srv := httptest.NewServer(e.d.handler(APIConfig{MaxBody: 1 << 20, MaxLimit: 1000}))
		defer srv.Close()
		url := srv.URL + "/v1/cells/overhead/append"
		post := func() {
			resp, err := http.Post(url, "application/octet-stream", bytes.NewReader(rec))
			if err != nil {
				b.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("append: %s", resp.Status)
			}
		}
		post() // claims the cell
		var tDeed, tRaw pairTimes
		for i := 0; i < b.N; i++ {
			start := time.Now()
			post()
			tDeed.add(start)
			start = time.Now()
			e.put(b, fmt.Sprintf("raw/cells/overhead/ltx/e1/%016x.ltx", i+1), slotBody)
			tRaw.add(start)
		}
		reportOverhead(b, tDeed, tRaw, "api/raw")
	})
}

// pairTimes collects the latencies of one side of an overhead comparison.
type pairTimes []time.Duration

func (p *pairTimes) add(start time.Time) { *p = append(*p, time.Since(start)) }

func (p pairTimes) median() time.Duration {
	s := slices.Clone(p)
	slices.Sort(s)
	return s[len(s)/2]
}

func (p pairTimes) total() (t time.Duration) {
	for _, d := range p {
		t += d
	}
	return t
}

// reportOverhead reports deed's latency over raw's: the ratio of the
// medians (unit), which a GC pause or a noisy neighbour on a shared
// machine barely moves, and the ratio of the totals (unit+"-mean").
func reportOverhead(b *testing.B, deed, raw pairTimes, unit string) {
	b.ReportMetric(float64(deed.median())/float64(raw.median()), unit)
	b.ReportMetric(float64(deed.total())/float64(raw.total()), unit+"-mean")
}

// overheadEnv is a fresh in-process HTTP fake with a daemon on it and a raw
// SDK client to it.
type overheadEnv struct {
	d   *Daemon
	raw *awss3.Client
	bkt string
}

func newOverheadEnv(b *testing.B, rtt time.Duration) *overheadEnv {
	tg := s3test.HTTPFakeWith(b, fakes3.ServerOptions{Latency: rtt})
	d := benchDaemon(b, tg.Bucket)
	b.Cleanup(func() { closeDaemon(b, d) })
	return &overheadEnv{d: d, raw: rawClient(b, tg.Endpoint), bkt: tg.Loc.Bucket}
}

// put is a raw PutObject with If-None-Match: *.
func (e *overheadEnv) put(b *testing.B, key string, body []byte) {
	if _, err := e.raw.PutObject(context.Background(), &awss3.PutObjectInput{Bucket: &e.bkt, Key: aws.String(key), Body: bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))), IfNoneMatch: aws.String("*")}); err != nil {
		b.Fatal(err)
	}
}

// rawClient is the plain S3 client a user would write the loop with: the
// SDK's defaults (its standard retryer included, which never fires here),
// path-style addressing, static credentials, and request checksums only
// when required, as s3.Open sets them for S3-compatible stores.
func rawClient(t testing.TB, endpoint string, opts ...func(*awss3.Options)) *awss3.Client {
	t.Helper()
	cfg, err := awsconfig.LoadDefaultConfig(context.Background(),
		awsconfig.WithRegion(s3.DefaultRegion), awsconfig.WithCredentialsProvider(s3test.Credentials()))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	cfg.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	return awss3.NewFromConfig(cfg, append([]func(*awss3.Options){func(o *awss3.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.UsePathStyle = true
	}}, opts...)...)
}
