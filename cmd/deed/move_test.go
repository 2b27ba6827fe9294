package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/daemon"
	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
)

// fleetDaemon serves an in-process daemon of a fleet (a fleet secret, its
// own address advertised in its node lease) over e's store, behind
// httptest; its rebalancer is off, so that only the commands move cells.
func (e *cellEnv) fleetDaemon(t *testing.T, node string) (*client.Client, string) {
	t.Helper()
	c, url, _ := e.fleetDaemonServer(t, node)
	return c, url
}

// fleetDaemonServer is fleetDaemon, and a func that closes its API's
// server: the daemon stays, its lease live, its address refusing dials.
func (e *cellEnv) fleetDaemonServer(t *testing.T, node string) (*client.Client, string, func()) {
	t.Helper()
	return e.fleetDaemonOn(t, node, e.b)
}

// fleetDaemonOn is fleetDaemonServer with the daemon's store requests
// going to b (a view of e's store a test can cut).
func (e *cellEnv) fleetDaemonOn(t *testing.T, node string, b bucket.Bucket) (*client.Client, string, func()) {
	t.Helper()
	var h atomic.Pointer[http.Handler]
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*h.Load()).ServeHTTP(w, r) }))
	url := "http://" + srv.Listener.Addr().String()
	d, err := daemon.Open(t.Context(), daemon.Config{Node: node, Advertise: url, TTL: time.Second, MoveRate: -1,
		FleetSecret: moveTestSecret, API: daemon.APIConfig{MaxBody: 1 << 10, MaxLimit: 100}}, b, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	dh := d.Handler()
	h.Store(&dh)
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Close(ctx)
	})
	return apiClient(t, url, ""), url, srv.Close
}

// moveTestSecret is the fleet secret of fleetDaemon's daemons.
const moveTestSecret = "fleet-secret-of-move-tests"

// withFleetSecret sets DEED_FLEET_SECRET_FILE in e's environment to a file
// holding moveTestSecret.
func (e *cellEnv) withFleetSecret(t *testing.T) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fleet-secret")
	if err := os.WriteFile(path, []byte(moveTestSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.env[envFleetSecret] = path
}

// deed move finds the cell's holder through the bucket and has it hand the
// cell to the named node; deed drain --wait empties a node; deed nodes
// shows each node's cell count; no record is lost on the way.
func TestMoveAndDrainCommands(t *testing.T) {
	e := newCellEnv(t)
	// Without the fleet secret the commands do not believe a lease's
	// address.
	if r := e.run(t, "drain", "n2"); r.status != 2 || !strings.Contains(r.stderr, "--fleet-secret-file") {
		t.Fatalf("drain without the fleet secret: exit %d, %q", r.status, r.stderr)
	}
	e.withFleetSecret(t)
	c1, _ := e.fleetDaemon(t, "n1")
	c2, _ := e.fleetDaemon(t, "n2")
	for _, data := range []string{"one", "two"} {
		if _, err := c1.Append(t.Context(), "c", []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	// n1 learns of n2 at its next look at the node leases (TTL/3).
	var r result
	for range 50 {
		if r = e.run(t, "move", "c", "--to", "n2", "--json"); r.status != 2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var mv client.Moved
	if err := json.Unmarshal([]byte(r.stdout), &mv); r.status != 0 || err != nil || mv.From != "n1" || mv.To != "n2" || !mv.Moved {
		t.Fatalf("deed move: exit %d, %q %q", r.status, r.stdout, r.stderr)
	}
	if held, err := c2.Cells(t.Context()); err != nil || len(held.Cells) != 1 || held.Cells[0].Epoch != mv.Epoch {
		t.Fatalf("n2 after the move: %+v, %v", held, err)
	}
	if _, err := c2.Append(t.Context(), "c", []byte("three")); err != nil {
		t.Fatal(err)
	}

	r = e.run(t, "drain", "n2", "--wait", "--every", "50ms")
	if r.status != 0 || !strings.Contains(r.stdout, "node n2 is drained") {
		t.Fatalf("deed drain --wait: exit %d, %q %q", r.status, r.stdout, r.stderr)
	}
	if held, err := c2.Cells(t.Context()); err != nil || len(held.Cells) != 0 {
		t.Fatalf("n2 after its drain: %+v, %v", held, err)
	}
	// The drained node takes no cell: an append there is forwarded to n1,
	// which claims the cell.
	if _, err := c2.Append(t.Context(), "fresh", []byte("x")); err != nil {
		t.Fatalf("append of a free cell at the drained node: %v; want it forwarded to n1", err)
	}
	if held, err := c2.Cells(t.Context()); err != nil || len(held.Cells) != 0 {
		t.Fatalf("the drained node n2 took a cell: %+v, %v", held, err)
	}
	if held, err := c1.Cells(t.Context()); err != nil || !slices.ContainsFunc(held.Cells, func(c client.HeldCell) bool { return c.Cell == "fresh" }) {
		t.Fatalf("n1 after the append forwarded by the drained n2: %+v, %v", held, err)
	}
	recs, err := c1.Read(t.Context(), "c", client.ReadOptions{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rec := range recs.Records {
		got = append(got, string(rec.Data))
	}
	if strings.Join(got, ",") != "one,two,three" {
		t.Fatalf("records after move and drain: %v", got)
	}

	// The leases say n2 drains, after its next renewal.
	var rows []nodeRow
	for range 50 {
		r = e.run(t, "nodes", "--json")
		rows = nil
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			var row nodeRow
			if json.Unmarshal([]byte(line), &row) == nil {
				rows = append(rows, row)
			}
		}
		if len(rows) == 2 && rows[1].Draining && rows[1].Cells == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(rows) != 2 || rows[0].Node != "n1" || rows[1].Node != "n2" || !rows[1].Draining || rows[0].Draining || rows[0].Weight != 1 {
		t.Fatalf("deed nodes --json after the drain: %+v", rows)
	}
	if r = e.run(t, "nodes"); !strings.Contains(r.stdout, "CELLS") || !strings.Contains(r.stdout, "DRAINING") {
		t.Fatalf("deed nodes: %q", r.stdout)
	}

	if r = e.run(t, "move", "c", "--to", "nobody"); r.status != 2 || !strings.Contains(r.stderr, "DEED-E040") {
		t.Fatalf("move to a node that does not exist: exit %d, %q", r.status, r.stderr)
	}
}

// deed move of a cell whose holder's daemon cannot be reached asks the
// target instead of failing with "cannot reach the daemon": the target
// claims the cell once the holder's lease has expired, and until then
// answers DEED-E020 naming the holder; a free cell it claims at once.
func TestMoveFromUnreachableHolder(t *testing.T) {
	e := newCellEnv(t)
	e.withFleetSecret(t)
	c1, _, stop1 := e.fleetDaemonServer(t, "n1")
	c2, _ := e.fleetDaemon(t, "n2")
	if _, err := c1.Append(t.Context(), "c", []byte("one")); err != nil {
		t.Fatal(err)
	}
	stop1() // n1's address refuses dials; its leases stay live
	r := e.run(t, "move", "c", "--to", "n2")
	if r.status != 4 || !strings.Contains(r.stderr, "DEED-E020") || !strings.Contains(r.stderr, "held by live node n1") {
		t.Fatalf("deed move from an unreachable, live holder: exit %d, %q %q; want n2's DEED-E020 naming n1", r.status, r.stdout, r.stderr)
	}
	if _, err := c2.Cells(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// cutBucket is a store its daemon has lost: once cut, every request fails
// as a store that cannot be reached does.
type cutBucket struct {
	bucket.Bucket
	cut atomic.Bool
}

func (b *cutBucket) err(op, key string) error {
	return errcode.Errorf(errcode.CodeUnavailable, "%s %s: store unreachable (cut by the test)", op, key)
}

func (b *cutBucket) Get(ctx context.Context, key string, max int64) (bucket.Object, error) {
	if b.cut.Load() {
		return bucket.Object{}, b.err("get", key)
	}
	return b.Bucket.Get(ctx, key, max)
}

func (b *cutBucket) Head(ctx context.Context, key string) (bucket.Info, error) {
	if b.cut.Load() {
		return bucket.Info{}, b.err("head", key)
	}
	return b.Bucket.Head(ctx, key)
}

func (b *cutBucket) Put(ctx context.Context, key string, body []byte, cond bucket.Condition) (string, error) {
	if b.cut.Load() {
		return "", b.err("put", key)
	}
	return b.Bucket.Put(ctx, key, body, cond)
}

func (b *cutBucket) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	if b.cut.Load() {
		return b.err("delete", key)
	}
	return b.Bucket.Delete(ctx, key, cond)
}

func (b *cutBucket) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	if b.cut.Load() {
		return bucket.ListPage{}, b.err("list", in.Prefix)
	}
	return b.Bucket.List(ctx, in)
}

// deed move of a cell whose holder died (its address refuses dials, its
// store cut: its node lease and ownership record stay as they were, never
// renewed, never released): refused with DEED-E020 naming the holder while
// its lease may still be live, then, retried, claimed on the target once
// the lease has expired, not before; the record the dead holder
// acknowledged is kept and the next append follows it.
func TestMoveFromDeadHolderClaimsAfterExpiry(t *testing.T) {
	e := newCellEnv(t)
	e.withFleetSecret(t)
	b1 := &cutBucket{Bucket: e.b}
	c1, _, stop1 := e.fleetDaemonOn(t, "n1", b1)
	c2, _ := e.fleetDaemon(t, "n2")
	if _, err := c1.Append(t.Context(), "c", []byte("one")); err != nil {
		t.Fatal(err)
	}
	stop1()
	b1.cut.Store(true)
	died := time.Now()
	const ttl = time.Second // fleetDaemon's
	r := e.run(t, "move", "c", "--to", "n2")
	if time.Since(died) < ttl && (r.status != 4 || !strings.Contains(r.stderr, "DEED-E020") || !strings.Contains(r.stderr, "n1")) {
		t.Fatalf("deed move within the dead holder's TTL: exit %d, %q %q; want DEED-E020 naming n1", r.status, r.stdout, r.stderr)
	}
	for r.status != 0 {
		if r.status != 4 || !strings.Contains(r.stderr, "DEED-E020") {
			t.Fatalf("deed move from a dead holder: exit %d, %q %q; want DEED-E020 until its lease expires", r.status, r.stdout, r.stderr)
		}
		if time.Since(died) > 20*ttl {
			t.Fatalf("deed move still refused %v after the holder died: %q", time.Since(died), r.stderr)
		}
		time.Sleep(100 * time.Millisecond)
		r = e.run(t, "move", "c", "--to", "n2")
	}
	if took := time.Since(died); took < ttl {
		t.Fatalf("deed move claimed %v after the holder died, within its TTL of %v", took, ttl)
	}
	v, err := c2.Cells(t.Context())
	if err != nil || !slices.ContainsFunc(v.Cells, func(h client.HeldCell) bool { return h.Cell == "c" }) {
		t.Fatalf("after the move n2 holds %+v (%v), want c", v, err)
	}
	res, err := c2.Append(t.Context(), "c", []byte("two"))
	if err != nil || res.Pos != 2 {
		t.Fatalf("append after the move: %+v %v, want pos 2", res, err)
	}
	got, err := c2.Read(t.Context(), "c", client.ReadOptions{Barrier: true})
	if err != nil || len(got.Records) != 2 || string(got.Records[0].Data) != "one" || string(got.Records[1].Data) != "two" {
		t.Fatalf("read after the move: %+v %v, want one, two", got, err)
	}
	t.Logf("claimed on n2 %v after the holder died (TTL %v): %s", time.Since(died).Round(10*time.Millisecond), ttl, strings.TrimSpace(r.stdout))
}

// A lease anyone could have written is no member: deed drain refuses to
// send its request (and bearer token) to the address a forged lease names,
// and deed nodes marks the lease unverified.
func TestPlacementCommandsBelieveOnlyVerifiedLeases(t *testing.T) {
	e := newCellEnv(t)
	e.withFleetSecret(t)
	var reached atomic.Int64
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	defer evil.Close()
	body := `{"node":"evil","incarnation":"0123456789abcdef","addr":"` + evil.URL + `","ttl_ms":10000,"seq":1,"at_ms":1,"cells":0,"mac":"00"}`
	if _, err := e.b.Put(t.Context(), owner.NodeKey("evil"), []byte(body), bucket.None); err != nil {
		t.Fatal(err)
	}
	e.fleetDaemon(t, "n1")
	r := e.run(t, "drain", "evil", "--token", "the-operators-token")
	if r.status != 2 || !strings.Contains(r.stderr, "does not verify") {
		t.Fatalf("drain of a forged lease's node: exit %d, %q", r.status, r.stderr)
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the forged lease's address got %d requests", n)
	}
	r = e.run(t, "nodes", "--json")
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var row nodeRow
		if err := json.Unmarshal([]byte(line), &row); err != nil || row.Verified == nil || *row.Verified != (row.Node == "n1") {
			t.Errorf("deed nodes --json: %s", line)
		}
	}
	if r = e.run(t, "nodes"); !strings.Contains(r.stdout, "evil: unverified") {
		t.Errorf("deed nodes: %q", r.stdout)
	}
}
