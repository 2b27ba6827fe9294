package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/benchtest"
	"github.com/deedkit/deed/fakes3/s3test"
	"github.com/deedkit/deed/replication"
)

// BenchmarkBatchAppend: 100 records through the API as 100 single appends
// (one after another), as one batch of 100, and 4,096 records as one batch,
// each against the raw SDK loop a user would write instead (one create-only
// PUT per record) in the same run, over the HTTP fake with a latency per
// request. It reports records/s (deed's and the raw loop's, which runs 100
// records per iteration), PUTs per record, and deed's time per record over
// the raw loop's.
func BenchmarkBatchAppend(b *testing.B) {
	for _, rtt := range benchtest.RTTs {
		for _, mode := range []struct {
			name    string
			records int
			batch   bool
		}{{"single-100", 100, false}, {"batch-100", 100, true}, {"batch-4096", 4096, true}} {
			b.Run(fmt.Sprintf("%s/%s", benchtest.Name(rtt), mode.name), func(b *testing.B) {
				tg := s3test.HTTPFakeWith(b, fakes3.ServerOptions{Latency: rtt})
				counted := &benchtest.Counted{B: tg.Bucket, Prefix: "cells/"}
				d := benchDaemon(b, counted)
				b.Cleanup(func() { closeDaemon(b, d) })
				raw := rawClient(b, tg.Endpoint)
				env := &overheadEnv{d: d, raw: raw, bkt: tg.Loc.Bucket}
				srv := httptest.NewServer(d.handler(APIConfig{MaxBody: 1 << 20, MaxLimit: 1000}))
				defer srv.Close()
				rec := make([]byte, 100)
				slotBody, err := replication.Encode(&replication.File{Kind: replication.KindRecords, Epoch: 1, TxID: 1,
					Token: "0123456789abcdef0123456789abcdef", Pos: 1, Records: [][]byte{rec}})
				if err != nil {
					b.Fatal(err)
				}
				var req client.BatchRequest
				for range mode.records {
					req.Records = append(req.Records, client.BatchRecord{Data: rec})
				}
				batchBody, _ := json.Marshal(req)
				post := func(path string, body []byte) {
					resp, err := http.Post(srv.URL+path, "application/octet-stream", bytes.NewReader(body))
					if err != nil {
						b.Fatal(err)
					}
					_ = resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Fatalf("%s: %s", path, resp.Status)
					}
				}
				post("/v1/cells/bench/append", rec) // claims the cell
				before := counted.Counts()
				var tDeed, tRaw time.Duration
				slot := 0
				rawN := min(mode.records, 100) // the raw loop's rate per record is the same for any count
				for i := 0; i < b.N; i++ {
					start := time.Now()
					if mode.batch {
						post("/v1/cells/bench/batch", batchBody)
					} else {
						for range mode.records {
							post("/v1/cells/bench/append", rec)
						}
					}
					tDeed += time.Since(start)
					start = time.Now()
					for range rawN {
						slot++
						env.put(b, fmt.Sprintf("raw/cells/bench/ltx/e1/%016x.ltx", slot), slotBody)
					}
					tRaw += time.Since(start)
				}
				c := counted.Counts().Sub(before)
				n := float64(b.N * mode.records)
				b.ReportMetric(n/tDeed.Seconds(), "records/s")
				rawRate := float64(b.N*rawN) / tRaw.Seconds()
				b.ReportMetric(rawRate, "raw-records/s")
				b.ReportMetric(float64(c.Put)/n, "PUT/record")
				b.ReportMetric(rawRate/(n/tDeed.Seconds()), "deed/raw-time-per-record")
			})
		}
	}
}
