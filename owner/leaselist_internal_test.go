package owner

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/fakes3"
)

// A renewal taken from a LIST alone (same size class, no read) is first
// seen when the LIST's answer arrived, never when it was sent: a renewal
// sent while the LIST was in flight may be in its answer, and a first sight
// before the renewal was sent would let a peer call the node dead before it
// has fenced itself.
func TestRenewalFromListIsStampedAtTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		a, err := NewNode(m.Client("a"), Config{Name: "a", Addr: "http://a", TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer a.Close(t.Context())
		o := NewObserver(m.Client("o"), a.Params())
		if err := o.Refresh(t.Context()); err != nil { // first sight: a read
			t.Fatal(err)
		}
		// The next LIST is served 100 ms after it is sent; a's renewal is
		// sent 50 ms into it.
		m.Inject(fakes3.Rule{Client: "o", Op: fakes3.OpList, Latency: 100 * time.Millisecond})
		gets := m.Counts().Get
		listed := make(chan error, 1)
		go func() { listed <- o.Refresh(t.Context()) }()
		time.Sleep(50 * time.Millisecond)
		renewSent := time.Now()
		if res, err := a.renew(t.Context(), time.Now().Add(time.Second)); res != "ok" {
			t.Fatalf("renew: %s %v", res, err)
		}
		if err := <-listed; err != nil {
			t.Fatal(err)
		}
		if m.Counts().Get != gets {
			t.Fatalf("the renewal was read (%d GETs); want it taken from the LIST", m.Counts().Get-gets)
		}
		o.mu.Lock()
		ob := o.obs["a"]
		o.mu.Unlock()
		if !bucketSameETag(ob.ETag, a) {
			t.Fatal("the LIST did not show the renewal")
		}
		if ob.FirstSeen.Before(renewSent) {
			t.Fatalf("the renewal sent at %v was first seen at %v, before it was sent", renewSent, ob.FirstSeen)
		}
	})
}

func bucketSameETag(etag string, n *Node) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return etag == n.etag
}
