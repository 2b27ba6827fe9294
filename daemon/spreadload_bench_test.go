package daemon

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/s3test"
)

// BenchmarkSpreadLoad: records per second through the daemon's HTTP API
// under spread load, against a raw aws-sdk-go-v2 PUT loop with the same
// concurrency to the same store, in the same run.
//
//   - raw: C workers each sending create-only PutObjects (If-None-Match: *)
//     of 100-byte bodies to distinct keys, with the SDK's default HTTP
//     client (which keeps 10 idle connections per host).
//   - api: C clients (daemon/client, over an HTTP client that keeps C idle
//     connections to the daemon, so the loopback hop does not churn) each
//     appending 100-byte records to the M cells in turn, after every cell
//     was claimed by a first append.
//
// Both talk to one fakes3.Server (one store) through two listeners, so the
// TCP connections each side opens are counted apart. api/raw is the ratio
// of records/s (target ≥ 0.8); store-reuse% is the share of the daemon's
// store requests that did not open a new connection (target ≥ 99);
// raw-reuse% the same for the raw loop; store-req/rec the daemon's store
// requests per record.
//
// Everything runs in one process: the store fake, the daemon, its API
// clients and the raw loop share the machine's cores (2 on the machine the
// README's numbers come from), so records/s is CPU-bound and the ratio is
// what means something. C=256,M=1000 is issue 15's load; C=16,M=100 a
// quick one.
func BenchmarkSpreadLoad(b *testing.B) {
	for _, cfg := range []struct{ c, m, recs int }{{16, 100, 4000}, {256, 1000, 10000}} {
		b.Run(fmt.Sprintf("C=%d,M=%d", cfg.c, cfg.m), func(b *testing.B) { benchSpread(b, cfg.c, cfg.m, cfg.recs) })
	}
}

// connCounter counts the connections a server accepts and the requests it
// serves.
type connCounter struct{ conns, reqs atomic.Int64 }

// serve starts an httptest server for h on 127.0.0.1 that counts into c.
func (c *connCounter) serve(b *testing.B, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.reqs.Add(1)
		h.ServeHTTP(w, r)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			c.conns.Add(1)
		}
	}
	srv.Start()
	b.Cleanup(srv.Close)
	return srv
}

func (c *connCounter) snapshot() (conns, reqs int64) { return c.conns.Load(), c.reqs.Load() }

// reuse is the percentage of requests served on a reused connection.
func reuse(conns, reqs int64) float64 {
	if reqs == 0 {
		return 0
	}
	return 100 * float64(reqs-conns) / float64(reqs)
}

func benchSpread(b *testing.B, c, m, recs int) {
	ctx := context.Background()
	const bkt = "deed-test"
	fake, err := fakes3.NewServer(fakes3.ServerOptions{Buckets: []string{bkt},
		Credentials: &fakes3.Credentials{AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = fake.Close() })
	var rawCount, storeCount connCounter
	rawSrv := rawCount.serve(b, fake.Handler())
	storeSrv := storeCount.serve(b, fake.Handler())

	store, err := s3.Open(ctx, bucket.Location{Bucket: bkt},
		s3.Options{Endpoint: storeSrv.URL, Region: s3.DefaultRegion, Credentials: s3test.Credentials()})
	if err != nil {
		b.Fatal(err)
	}
	d := benchDaemon(b, store)
	b.Cleanup(func() { closeDaemon(b, d) })
	api := httptest.NewServer(d.handler(APIConfig{MaxBody: 1 << 20, MaxLimit: 1000}))
	b.Cleanup(api.Close)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = c
	dc, err := client.New(api.URL, client.Options{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		b.Fatal(err)
	}
	raw := rawClient(b, rawSrv.URL)
	rec := bytes.Repeat([]byte("r"), 100)

	// run calls op(worker, n) for n in [0, total) over c workers and returns
	// the wall time it took.
	run := func(total int, op func(n int) error) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range c {
			wg.Go(func() {
				for {
					n := int(next.Add(1) - 1)
					if n >= total {
						return
					}
					if err := op(n); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
		return time.Since(start)
	}
	cell := func(n int) string { return fmt.Sprintf("cell-%04d", n%m) }
	appendOne := func(n int) error {
		_, err := dc.Append(ctx, cell(n), rec)
		return err
	}
	run(m, appendOne) // claims every cell

	var tRaw, tAPI time.Duration
	var storeConns, storeReqs, rawConns, rawReqs int64
	key := 0
	for i := 0; i < b.N; i++ {
		c0, r0 := rawCount.snapshot()
		base := key
		tRaw += run(recs, func(n int) error {
			k := fmt.Sprintf("raw/cells/%s/ltx/e1/%016x.ltx", cell(n), base+n+1)
			_, err := raw.PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String(bkt), Key: &k,
				Body: bytes.NewReader(rec), ContentLength: aws.Int64(int64(len(rec))), IfNoneMatch: aws.String("*")})
			return err
		})
		key += recs
		c1, r1 := rawCount.snapshot()
		rawConns, rawReqs = rawConns+c1-c0, rawReqs+r1-r0

		c0, r0 = storeCount.snapshot()
		tAPI += run(recs, appendOne)
		c1, r1 = storeCount.snapshot()
		storeConns, storeReqs = storeConns+c1-c0, storeReqs+r1-r0
	}
	total := float64(recs * b.N)
	rawRate, apiRate := total/tRaw.Seconds(), total/tAPI.Seconds()
	b.ReportMetric(rawRate, "raw-rec/s")
	b.ReportMetric(apiRate, "api-rec/s")
	b.ReportMetric(apiRate/rawRate, "api/raw")
	b.ReportMetric(reuse(storeConns, storeReqs), "store-reuse%")
	b.ReportMetric(reuse(rawConns, rawReqs), "raw-reuse%")
	b.ReportMetric(float64(storeReqs)/total, "store-req/rec")
}
