package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/daemon/daemontest"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// The tests here check every answer an append gets against what the
// bucket holds afterwards, under a cancel, a fence and (in
// e2e_outcome_test.go) a drain: a record answered 200 is in the log, one
// refused ("applied": "no", any code but DEED-E012) is not, and one of
// unknown outcome (DEED-E012, "applied": "unknown") may be either.

// lostAnswers is a bucket whose record PUTs (keys ending in .ltx under
// prefix), while armed, land and then hang: the write is in the bucket but
// its answer comes only when released, or never if the request's context
// ends first. That is the write of unknown outcome the API must not report
// as refused.
type lostAnswers struct {
	bucket.Bucket
	prefix  string
	landed  chan string   // each key that landed with its answer held back
	release chan struct{} // closed: held answers are delivered

	mu    sync.Mutex
	armed bool
}

func newLostAnswers(b bucket.Bucket, prefix string) *lostAnswers {
	return &lostAnswers{Bucket: b, prefix: prefix, landed: make(chan string, 64), release: make(chan struct{})}
}

func (l *lostAnswers) arm(on bool) {
	l.mu.Lock()
	l.armed = on
	l.mu.Unlock()
}

func (l *lostAnswers) Put(ctx context.Context, key string, body []byte, c bucket.Condition) (string, error) {
	l.mu.Lock()
	hold := l.armed && strings.HasPrefix(key, l.prefix) && strings.HasSuffix(key, ".ltx")
	l.mu.Unlock()
	etag, err := l.Bucket.Put(ctx, key, body, c)
	if !hold || err != nil {
		return etag, err
	}
	l.landed <- key
	select {
	case <-l.release:
		return etag, nil
	case <-ctx.Done():
		return "", bucket.Classify("put", key, c, 0, "", ctx.Err())
	}
}

// openTestDaemon opens an in-process daemon on b (no probe) and closes it
// when the test ends, failing the test if Close fails (closeOK).
func openTestDaemon(t *testing.T, b bucket.Bucket, ttl time.Duration) *Daemon {
	t.Helper()
	return openTestDaemonConfig(t, b, Config{Node: "a", Advertise: "http://a", TTL: ttl})
}

// openTestDaemonConfig is openTestDaemon with a whole Config.
func openTestDaemonConfig(t *testing.T, b bucket.Bucket, cfg Config) *Daemon {
	t.Helper()
	d, err := Open(t.Context(), cfg, b, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeOK(t, d) })
	return d
}

// appendAnswer is what one append was told.
type appendAnswer = daemontest.Answer

// serveAppend runs one append through the handler and returns its answer.
func serveAppend(t testing.TB, h http.Handler, cell, data string) appendAnswer {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "http://127.0.0.1/v1/cells/"+cell+"/append", strings.NewReader(data)))
	var body client.ErrorBody
	decodeJSON(t, rec, &body)
	return appendAnswer{Data: data, Status: rec.Code, Code: body.Code, Applied: string(body.Applied)}
}

// decodeJSON decodes rec's body into v and fails t (without stopping it:
// callers run in goroutines too) when the answer is not JSON, so that an
// answer of another kind cannot pass as zero values.
func decodeJSON(t testing.TB, rec *httptest.ResponseRecorder, v any) {
	t.Helper()
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		t.Errorf("answer %d %q (Content-Type %q) is not JSON: %v", rec.Code, rec.Body.String(), rec.Header().Get("Content-Type"), err)
	}
}

// A node fences while appends are in flight and the store hangs on the
// record PUT it already applied: the dropped log's close gives up after
// one TTL and cuts the writer off. The append whose record landed is
// answered DEED-E012 (it used to be DEED-E011, the cancellation rewritten
// as "unavailable", and a client that trusted it wrote the record twice);
// those still queued are refused, not written.
func TestAppendAnswersMatchBucketOnFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		const ttl = 2 * time.Second
		la := newLostAnswers(m.Client("a"), "cells/c/ltx/")
		d := openTestDaemon(t, la, ttl)
		h := d.handler(APIConfig{MaxBody: 1 << 20, MaxLimit: 1000})
		answers := []appendAnswer{serveAppend(t, h, "c", "before")}
		if answers[0].Status != 200 {
			t.Fatalf("first append: %v", answers[0])
		}
		// The node lease can no longer be renewed, and record PUTs land
		// with their answers held back.
		m.Inject(fakes3.Rule{Client: "a", Key: owner.NodeKey("a"), Fault: fakes3.ErrBefore})
		la.arm(true)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Go(func() {
				a := serveAppend(t, h, "c", fmt.Sprintf("in-flight-%d", i))
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			})
			if i == 0 {
				<-la.landed // the first is in flight; the others queue behind it
			}
		}
		wg.Wait()
		var unknown, refused int
		for _, a := range answers[1:] {
			switch a.Code {
			case errcode.CodeAmbiguous:
				unknown++
			case "":
				t.Errorf("acknowledged during the fence: %v", a)
			default:
				refused++
			}
		}
		if unknown != 1 || refused != 5 {
			t.Errorf("want 1 unknown (the record in flight) and 5 refused (queued), got %v", answers[1:])
		}
		m.ClearFaults()
		daemontest.CheckAnswers(t, m.Client("reader"), "c", answers)
		if got := metricValue(t, d, `deed_appends_total{result="unknown"}`); got != "1" {
			t.Errorf("deed_appends_total{result=\"unknown\"} = %q, want 1", got)
		}
	})
}

// A client gives up on an append whose record has landed but whose answer
// is held back. The client (the one `deed append` uses) reports
// DEED-E012, not "cannot reach the daemon" (DEED-E011), and the daemon
// counts the append as unknown.
func TestAppendAnswersMatchBucketOnClientCancel(t *testing.T) {
	m := fakes3.NewMem()
	la := newLostAnswers(m.Client("a"), "cells/c/ltx/")
	d := openTestDaemon(t, la, 2*time.Second)
	srv := httptest.NewServer(d.handler(APIConfig{MaxBody: 1 << 20, MaxLimit: 1000}))
	defer srv.Close()
	c, err := client.New(srv.URL, client.Options{HTTPClient: &http.Client{}, RetryFor: -1})
	if err != nil {
		t.Fatal(err)
	}
	send := func(ctx context.Context, data string) appendAnswer {
		_, err := c.Append(ctx, "c", []byte(data))
		if err == nil {
			return appendAnswer{Data: data, Status: 200}
		}
		var ce *client.Error
		if !errors.As(err, &ce) {
			t.Errorf("append %q: %T %v, want a *client.Error", data, err, err)
			return appendAnswer{Data: data, Status: 503, Code: errcode.CodeOf(err), Applied: string(client.AppliedOf(err))}
		}
		return appendAnswer{Data: data, Status: 503, Code: ce.Code, Applied: string(ce.Applied)}
	}
	answers := []appendAnswer{send(t.Context(), "before")}
	la.arm(true)
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan appendAnswer)
	go func() { got <- send(ctx, "cancelled") }()
	<-la.landed
	cancel()
	a := <-got
	if a.Code != errcode.CodeAmbiguous {
		t.Errorf("cancelled append with its record in the bucket: %v, want DEED-E012", a)
	}
	answers = append(answers, a)
	// The daemon's side of it: its handler sees its context end with the
	// PUT in flight, before the held answer is released.
	for deadline := time.Now().Add(10 * time.Second); metricValue(t, d, `deed_appends_total{result="unknown"}`) != "1"; {
		if v := metricValue(t, d, `deed_appends_total{result="error"}`); v != "" && v != "0" {
			t.Fatal("the daemon counted an append of unknown outcome as an error")
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not count the cancelled append as unknown")
		}
		time.Sleep(time.Millisecond)
	}
	la.arm(false)
	close(la.release)
	answers = append(answers, send(t.Context(), "after"))
	daemontest.CheckAnswers(t, m.Client("reader"), "c", answers)
}

// metricValue is the value of one series on the daemon's /metrics, or ""
// when it has none.
func metricValue(t *testing.T, d *Daemon, series string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	d.handler(APIConfig{MaxBody: 1, MaxLimit: 1}).ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/metrics", nil))
	for line := range strings.SplitSeq(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// headGate is a bucket whose HEADs under prefix, while armed, wait at a
// gate: a barrier read that has its cell's log in hand is held just before
// it looks at the next slot.
type headGate struct {
	bucket.Bucket
	prefix  string
	entered chan struct{}
	open    chan struct{}

	mu    sync.Mutex
	armed bool
}

func (g *headGate) Head(ctx context.Context, key string) (bucket.Info, error) {
	g.mu.Lock()
	wait := g.armed && strings.HasPrefix(key, g.prefix)
	g.armed = g.armed && !wait // once
	g.mu.Unlock()
	if wait {
		g.entered <- struct{}{}
		<-g.open
	}
	return g.Bucket.Head(ctx, key)
}

// A barrier read that races the end of its lease (the log is sealed under
// it) answers what happened: DEED-E011 (retry) when the cell was released,
// DEED-E025 when the node fenced; never 400 DEED-E040 "log closed", which
// it used to answer.
func TestBarrierReadRacingLeaseEnd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		end    func(t *testing.T, d *Daemon, m *fakes3.Mem)
		status int
		code   errcode.Code
	}{
		{"released", func(t *testing.T, d *Daemon, _ *fakes3.Mem) {
			if _, err := d.release(t.Context(), "c"); err != nil {
				t.Fatal(err)
			}
		}, http.StatusServiceUnavailable, errcode.CodeUnavailable},
		{"node fenced", func(t *testing.T, d *Daemon, m *fakes3.Mem) {
			m.Inject(fakes3.Rule{Client: "a", Key: owner.NodeKey("a"), Fault: fakes3.ErrBefore})
			time.Sleep(2 * 2 * time.Second) // fenced, and the dropped log sealed
			synctest.Wait()
		}, http.StatusServiceUnavailable, errcode.CodeNodeFenced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := fakes3.NewMem()
				g := &headGate{Bucket: m.Client("a"), prefix: "cells/c/ltx/", entered: make(chan struct{}), open: make(chan struct{})}
				d := openTestDaemon(t, g, 2*time.Second)
				h := d.handler(APIConfig{MaxBody: 1 << 20, MaxLimit: 1000})
				if a := serveAppend(t, h, "c", "x"); a.Status != 200 {
					t.Fatal(a)
				}
				g.mu.Lock()
				g.armed = true
				g.mu.Unlock()
				rec := httptest.NewRecorder()
				done := make(chan struct{})
				go func() {
					defer close(done)
					h.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/v1/cells/c/records?barrier=true", nil))
				}()
				<-g.entered
				tc.end(t, d, m)
				close(g.open)
				<-done
				var body client.ErrorBody
				decodeJSON(t, rec, &body)
				if rec.Code != tc.status || body.Code != tc.code {
					t.Fatalf("barrier read racing the lease's end: %d %s, want %d %s", rec.Code, rec.Body.String(), tc.status, tc.code)
				}
			})
		})
	}
}
