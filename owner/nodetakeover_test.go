package owner_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// A process opening a node id whose lease another incarnation holds waits
// out the TTL that lease advertises, not its own: a live daemon of TTL 10s
// renews every 3.3s, and a `deed claim --hold --ttl 1s` under the same
// node id once took its lease over after 1.1s of watching.
func TestNodeTakeoverWaitsOutTheAdvertisedTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		long, err := owner.NewNode(m.Client("daemon"), owner.Config{Name: "one", Addr: "http://a", TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := long.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer long.Close(t.Context())

		short, err := owner.NewNode(m.Client("claim"), owner.Config{Name: "one", TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = short.Open(t.Context())
		if err == nil {
			defer short.Close(t.Context())
			t.Fatalf("a 1s-TTL process took over a live 10s-TTL node lease after %v", time.Since(start))
		}
		if errcode.CodeOf(err) != errcode.CodeHeld {
			t.Fatalf("open: %v, want DEED-E020 (in use by a live process)", err)
		}
		if long.Err() != nil {
			t.Fatalf("the live daemon was fenced: %v", long.Err())
		}
	})
}

// A dead 10s-TTL lease is still taken over, after 10s+margin of watching,
// not 1s+margin.
func TestDeadNodeLeaseOfLongerTTLIsTakenOverAfterItsTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		body := []byte(`{"node":"one","incarnation":"gone","addr":"http://a","ttl_ms":10000,"seq":7,"at_ms":1,"cells":0}`)
		if _, err := m.Client("x").Put(t.Context(), owner.NodeKey("one"), body, bucket.IfAbsent); err != nil {
			t.Fatal(err)
		}
		short, err := owner.NewNode(m.Client("claim"), owner.Config{Name: "one", TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := short.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer short.Close(t.Context())
		if took := time.Since(start); took < 10*time.Second {
			t.Fatalf("took the 10s-TTL lease over after %v of watching", took)
		}
	})
}
