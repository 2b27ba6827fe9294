package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// A bucket writer without the fleet secret cannot join the fleet: a lease
// it makes up (valid JSON, a plausible incarnation and address, a weight of
// 1000, renewed every 0.5s like a live node's) is alive to every observer,
// yet never a member: no node forwards a client's request to it, hands it
// a cell, or counts it in placement, and the status page says it is
// unverified.
func TestForgedLeaseIsNeverAMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		f := newTestFleet()
		var reached atomic.Int64
		f.mu.Lock()
		f.hs["evil"] = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached.Add(1)
			w.Header().Set(HeaderNode, "evil")
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"cell":"x","pos":1,"node":"evil","epoch":1}`)
		})
		f.mu.Unlock()
		const ttl = 3 * time.Second
		stop := make(chan struct{})
		forged := make(chan struct{})
		go func() {
			defer close(forged)
			evil := m.Client("evil")
			for seq := 1; ; seq++ {
				body := fmt.Sprintf(`{"node":"evil","incarnation":"0123456789abcdef0123456789abcdef","addr":"http://evil","ttl_ms":3000,"seq":%d,"at_ms":%d,"weight":1000,"cells":0,"mac":"%064x"}`, seq, time.Now().UnixMilli(), seq)
				_, _ = evil.Put(t.Context(), owner.NodeKey("evil"), []byte(body), bucket.None)
				select {
				case <-stop:
					return
				case <-time.After(500 * time.Millisecond):
				}
			}
		}()
		defer func() {
			close(stop)
			<-forged
		}()
		// A cell the forger says it holds: a claim of it is refused for
		// evil, whose address routing must not follow.
		if _, err := m.Client("evil").Put(t.Context(), owner.CellKey("stolen"), []byte(`{"node":"evil","epoch":1,"nonce":"n1","at_ms":1}`), bucket.IfAbsent); err != nil {
			t.Fatal(err)
		}
		a := f.open(t, m, "a", ttl, 0)
		b := f.open(t, m, "b", ttl, 0)
		c := f.open(t, m, "c", ttl, 0)
		time.Sleep(ttl) // every node has seen every lease, evil's renewing

		for _, d := range []*Daemon{a, b, c} {
			v, ok := d.node.Observer().Lookup("evil")
			if !ok || !v.Alive || v.Verified {
				t.Fatalf("%s sees evil as %+v; want alive and unverified", d.cfg.Node, v)
			}
			for _, mb := range d.members() {
				if mb.Name == "evil" {
					t.Fatalf("%s counts the forged lease as a member", d.cfg.Node)
				}
			}
		}
		// Client appends through every node to cells of every placement:
		// with evil a member of weight 1000 nearly all would go to it.
		for i := range 60 {
			for _, node := range []string{"a", "b", "c"} {
				cell := fmt.Sprintf("cell-%d", i)
				rec := httptest.NewRecorder()
				f.handler(node).ServeHTTP(rec, httptest.NewRequest("POST", "http://127.0.0.1/v1/cells/"+cell+"/append", strings.NewReader("x")))
				if rec.Code != 200 || rec.Header().Get(HeaderNode) == "evil" {
					t.Fatalf("append %s through %s: %d %s (served by %s)", cell, node, rec.Code, rec.Body, rec.Header().Get(HeaderNode))
				}
			}
		}
		rec := httptest.NewRecorder()
		f.handler("a").ServeHTTP(rec, httptest.NewRequest("POST", "http://127.0.0.1/v1/cells/stolen/append", strings.NewReader("x")))
		if rec.Code != 409 || rec.Header().Get(HeaderNode) == "evil" {
			t.Fatalf("append to the cell evil claims: %d %s (served by %s); want the refusal", rec.Code, rec.Body, rec.Header().Get(HeaderNode))
		}
		// A drain hands every cell of a off: none to evil.
		rec = httptest.NewRecorder()
		f.handler("a").ServeHTTP(rec, httptest.NewRequest("POST", "http://127.0.0.1/v1/node/drain", nil))
		if rec.Code != 200 {
			t.Fatalf("drain: %d %s", rec.Code, rec.Body)
		}
		time.Sleep(2 * ttl)
		synctest.Wait()
		if n := a.countLive(); n != 0 {
			t.Fatalf("a holds %d cells after its drain", n)
		}
		if n := reached.Load(); n != 0 {
			t.Fatalf("the forged node received %d requests", n)
		}
		// The status page and its JSON say evil is unverified.
		rec = httptest.NewRecorder()
		f.handler("b").ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/v1/status", nil))
		var st Status
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || !st.Fleet {
			t.Fatalf("status: %v %s", err, rec.Body)
		}
		for _, v := range st.Nodes {
			if v.Verified != (v.Node != "evil") {
				t.Errorf("status: node %s verified=%v", v.Node, v.Verified)
			}
		}
		rec = httptest.NewRecorder()
		f.handler("b").ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/", nil))
		if !strings.Contains(rec.Body.String(), "unverified: not a member") || strings.Contains(rec.Body.String(), `href="http://evil"`) {
			t.Errorf("the status page does not mark evil unverified, or links it")
		}
	})
}

// A peer's renewal that changes only its cell count is taken from the LIST
// without a read, so the status page has the peers' leases read again
// (at most every TTL/3, in the background) while someone looks: its cell
// counts are current a moment after a look.
func TestStatusPageReadsPeersCellCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		f := newTestFleet()
		const ttl = 3 * time.Second
		a := f.open(t, m, "a", ttl, -1)
		b := f.open(t, m, "b", ttl, -1)
		time.Sleep(ttl)
		for _, c := range cellNames(3) {
			if _, err := b.acquire(t.Context(), c, false); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(ttl) // b renewed, advertising 3 cells; a listed it
		cellsOf := func() int {
			for _, v := range a.status().Nodes {
				if v.Node == "b" {
					return v.Cells
				}
			}
			return -1
		}
		cellsOf()
		synctest.Wait()
		if got := cellsOf(); got != 3 {
			t.Fatalf("a's status page shows b holding %d cells, want 3", got)
		}
	})
}
