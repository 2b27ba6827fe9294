package daemon

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// testVersion is the version the test daemons report in deed_build_info.
const testVersion = "v0.0.0-test"

// testDaemon is an in-process daemon over a shared store, behind httptest.
type testDaemon struct {
	d   *Daemon
	srv *httptest.Server
}

func startTestDaemon(t testing.TB, b bucket.Bucket, node string, api APIConfig) *testDaemon {
	t.Helper()
	if api.MaxBody == 0 {
		api.MaxBody = 1 << 20
	}
	if api.MaxLimit == 0 {
		api.MaxLimit = 1000
	}
	d, err := Open(t.Context(), Config{Node: node, Advertise: "http://" + node, TTL: 2 * time.Second, Version: testVersion}, b, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	td := &testDaemon{d: d, srv: httptest.NewServer(d.handler(api))}
	t.Cleanup(func() { td.stop(t) })
	return td
}

func (td *testDaemon) stop(t testing.TB) {
	t.Helper()
	td.srv.Close()
	closeOK(t, td.d)
}

// closeOK closes d (10 s deadline) and fails t when Close fails: a test
// that does not expect its shutdown to fail checks the drain (seal,
// release, node lease) every time. A helper that closes the daemon when
// the test ends uses it, so a test that expects Close to fail opts out by
// closing first with closeFails, which names the failure it expects (a
// second Close returns nil).
func closeOK(t testing.TB, d *Daemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Close(ctx); err != nil {
		t.Errorf("close %s: %v", d.cfg.Node, err)
	}
}

// closeFails closes d and requires Close to fail with an error for which
// want is true; what says which failure the test expects.
func closeFails(t testing.TB, d *Daemon, what string, want func(error) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Close(ctx); err == nil || !want(err) {
		t.Errorf("close %s: %v, want %s", d.cfg.Node, err, what)
	}
}

// call sends one request and decodes the JSON answer into a map.
func (td *testDaemon) call(t *testing.T, method, path, body string, hdr ...string) (int, map[string]any) {
	t.Helper()
	a := send(t, method, td.srv.URL+path, body, hdr...)
	return a.status, a.body
}

func wantErr(t *testing.T, status int, body map[string]any, wantStatus int, code errcode.Code) {
	t.Helper()
	if status != wantStatus || body["code"] != string(code) || !strings.HasPrefix(fmt.Sprint(body["error"]), string(code)) {
		t.Fatalf("got %d %v, want %d with %s", status, body, wantStatus, code)
	}
}

func TestDaemonAppendReadRelease(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	b := startTestDaemon(t, m.Client("b"), "b", APIConfig{})

	var pos []float64
	for i := range 5 {
		st, res := a.call(t, "POST", "/v1/cells/c1/append", fmt.Sprintf("rec-%d", i))
		if st != 200 || res["epoch"] != 1.0 {
			t.Fatalf("append %d: %d %v", i, st, res)
		}
		pos = append(pos, res["pos"].(float64))
	}
	for i := 1; i < len(pos); i++ {
		if pos[i] != pos[i-1]+1 {
			t.Fatalf("positions not consecutive: %v", pos)
		}
	}
	st, res := a.call(t, "GET", "/v1/cells/c1/records?after=2&barrier=true", "")
	recs := res["records"].([]any)
	if st != 200 || len(recs) != 3 || recs[0].(map[string]any)["pos"] != 3.0 {
		t.Fatalf("read: %d %v", st, res)
	}
	// b sees a as the live owner and is refused, naming a and its address.
	st, res = b.call(t, "POST", "/v1/cells/c1/append", "intruder")
	wantErr(t, st, res, 409, errcode.CodeHeld)
	if res["owner"] != "a" || res["owner_addr"] != "http://a" {
		t.Fatalf("E020 body must name the owner: %v", res)
	}
	// Anyone may read without a barrier; a barrier needs the owner.
	st, res = b.call(t, "GET", "/v1/cells/c1/records", "")
	if st != 200 || len(res["records"].([]any)) != 5 {
		t.Fatalf("read on b: %d %v", st, res)
	}
	st, res = b.call(t, "GET", "/v1/cells/c1/records?barrier=true", "")
	wantErr(t, st, res, 409, errcode.CodeNotHolder)

	st, res = b.call(t, "GET", "/v1/cells/c1", "")
	if st != 200 || res["node"] != "a" || res["held_here"] != false || res["owner_alive"] != true || res["owner_addr"] != "http://a" {
		t.Fatalf("show on b: %v", res)
	}
	// Release seals and releases: b takes over at once and continues the log.
	st, res = a.call(t, "POST", "/v1/cells/c1/release", "")
	if st != 200 || res["released"] != true {
		t.Fatalf("release: %d %v", st, res)
	}
	st, res = b.call(t, "POST", "/v1/cells/c1/append", "after-release")
	if st != 200 || res["epoch"] != 2.0 || res["pos"] != 6.0 {
		t.Fatalf("append on b after release: %d %v", st, res)
	}
	st, res = a.call(t, "POST", "/v1/cells/c1/release", "")
	wantErr(t, st, res, 409, errcode.CodeNotHolder)
}

// A forced claim on the other node makes the first daemon's next append
// fail with DEED-E021, and everything it acknowledged is still read.
// sealGate is b's store in TestDaemonForcedTakeover: b's first write into
// the old epoch's slots (the seal that ends it) waits until the holder has
// acknowledged an append after b's claim landed, so that the takeover
// window (new epoch on record, old chain not yet sealed) always contains
// an acknowledged append, however the machine schedules the goroutines.
type sealGate struct {
	bucket.Bucket
	prefix  string
	acked   func() int // the holder's acknowledged appends so far
	once    sync.Once
	atClaim int // acked when the seal was about to be written
	inside  int // acked while the seal waited
}

func (g *sealGate) Put(ctx context.Context, key string, body []byte, cond bucket.Condition) (string, error) {
	if strings.HasPrefix(key, g.prefix) {
		g.once.Do(func() {
			g.atClaim = g.acked()
			deadline := time.Now().Add(10 * time.Second)
			for g.acked() == g.atClaim && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			g.inside = g.acked() - g.atClaim
		})
	}
	return g.Bucket.Put(ctx, key, body, cond)
}

func TestDaemonForcedTakeover(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	var acked []string
	var mu sync.Mutex
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	gate := &sealGate{Bucket: m.Client("b"), prefix: replication.EpochPrefix("c", 1), acked: count}
	b := startTestDaemon(t, gate, "b", APIConfig{})
	if st, res := a.call(t, "POST", "/v1/cells/c/append", "first"); st != 200 {
		t.Fatalf("first append: %d %v", st, res)
	}
	acked = append(acked, "first")
	// The writers append until the forced claim has returned (bounded, in
	// case it never does).
	var claimed atomic.Bool
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !claimed.Load() && i < 250; i++ {
				data := fmt.Sprintf("w%d-%d", w, i)
				st, _ := a.call(t, "POST", "/v1/cells/c/append", data)
				if st == 200 {
					mu.Lock()
					acked = append(acked, data)
					mu.Unlock()
				}
			}
		})
	}
	st, res := b.call(t, "POST", "/v1/cells/c/claim?force=true", "")
	claimed.Store(true)
	if st != 200 || res["node"] != "b" {
		t.Fatalf("forced claim: %d %v", st, res)
	}
	wg.Wait()
	if gate.inside == 0 {
		t.Fatal("no append was acknowledged between b's claim and its seal of epoch 1: the test proved nothing")
	}
	st, res = a.call(t, "POST", "/v1/cells/c/append", "stale")
	// a no longer holds c (its lease ended on the seal), so it tries to
	// claim and finds b alive — or, if it had not noticed yet, the append
	// itself is refused as superseded. Both refuse; neither is written.
	if st != 409 || (res["code"] != string(errcode.CodeSuperseded) && res["code"] != string(errcode.CodeHeld)) {
		t.Fatalf("stale append: %d %v", st, res)
	}
	got := map[string]int{}
	for after := 0.0; ; {
		st, res := b.call(t, "GET", fmt.Sprintf("/v1/cells/c/records?barrier=true&limit=1000&after=%d", int(after)), "")
		recs, _ := res["records"].([]any)
		if st != 200 || recs == nil {
			t.Fatalf("read after %v: %d %v", after, st, res)
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			data, _ := base64Decode(r.(map[string]any)["data"].(string))
			got[data]++
			after = r.(map[string]any)["pos"].(float64)
		}
	}
	for _, d := range acked {
		if got[d] != 1 {
			t.Fatalf("acknowledged %q read %d times", d, got[d])
		}
	}
	if got["stale"] != 0 {
		t.Fatal("a refused append became visible")
	}
	t.Logf("%d appends acknowledged, %d of them while b's seal waited", len(acked), gate.inside)
}

func TestDaemonBadInput(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m, "a", APIConfig{MaxBody: 16, Token: "s3cret"})
	auth := []string{"Authorization", "Bearer s3cret"}
	before := m.Counts()
	st, res := a.call(t, "POST", "/v1/cells/c/append", "x")
	wantErr(t, st, res, 401, errcode.CodeUnauthorized)
	st, res = a.call(t, "POST", "/v1/cells/c/append", "x", "Authorization", "Bearer wrong")
	wantErr(t, st, res, 401, errcode.CodeUnauthorized)
	st, res = a.call(t, "POST", "/v1/cells/bad%20name/append", "x", auth...)
	wantErr(t, st, res, 400, errcode.CodeInvalidName)
	st, res = a.call(t, "POST", "/v1/cells/"+strings.Repeat("x", 201)+"/claim", "", auth...)
	wantErr(t, st, res, 400, errcode.CodeInvalidName)
	st, res = a.call(t, "POST", "/v1/cells/c/append", strings.Repeat("y", 17), auth...)
	wantErr(t, st, res, 400, errcode.CodeBadRequest)
	st, res = a.call(t, "GET", "/v1/cells/c/records?limit=0", "", auth...)
	wantErr(t, st, res, 400, errcode.CodeBadRequest)
	st, res = a.call(t, "GET", "/v1/cells/c/records?after=-1", "", auth...)
	wantErr(t, st, res, 400, errcode.CodeBadRequest)
	if d := m.Counts().Sub(before); d.Put != 0 {
		t.Fatalf("bad requests wrote %d objects", d.Put)
	}
	if st, _ := a.call(t, "GET", "/healthz", ""); st != 200 {
		t.Fatal("healthz must not need the token")
	}
	if st, _ := a.call(t, "GET", "/readyz", ""); st != 200 {
		t.Fatal("not ready")
	}
	st, res = a.call(t, "POST", "/v1/cells/c/append", "ok", auth...)
	if st != 200 {
		t.Fatalf("authorized append: %d %v", st, res)
	}
	_, res = a.call(t, "GET", "/metrics", "", auth...)
	text := res["raw"].(string)
	for _, series := range []string{"deed_cells_held 1", `deed_claims_total{reason="absent",result="ok"} 1`, `deed_appends_total{result="ok"} 1`, `deed_s3_requests_total{op="put",outcome="ok"}`, "deed_node_lease_held 1"} {
		if !strings.Contains(text, series) {
			t.Errorf("metrics lack %s", series)
		}
	}
}

// Close drains: the other node claims every cell at once, with the chains
// already sealed.
func TestDaemonDrain(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	b := startTestDaemon(t, m.Client("b"), "b", APIConfig{})
	for i := range 10 {
		if st, res := a.call(t, "POST", fmt.Sprintf("/v1/cells/c%d/append", i), "x"); st != 200 {
			t.Fatal(res)
		}
	}
	a.stop(t)
	for i := range 10 {
		st, res := b.call(t, "POST", fmt.Sprintf("/v1/cells/c%d/claim", i), "")
		if st != 200 || res["epoch"] != 2.0 {
			t.Fatalf("claim after drain: %d %v", st, res)
		}
	}
}

func base64Decode(s string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	return string(b), err
}
