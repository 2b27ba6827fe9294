package owner_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// openWatchingNode opens a node with cfg on b; it is closed when the test ends.
func openWatchingNode(t *testing.T, b bucket.Bucket, cfg owner.Config) *owner.Node {
	t.Helper()
	n, err := owner.NewNode(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	return n
}

// A lease whose cell is taken from it ends by itself, within the watch
// interval and with DEED-E021, while its holder writes nothing: a forced
// claim by another node, an operator's forced release, a deleted record.
func TestLeaseEndsWhenTheRecordNoLongerHoldsIt(t *testing.T) {
	const ttl = 3 * time.Second // watch every TTL/3 = 1s
	for _, tc := range []struct {
		name string
		take func(t *testing.T, m *fakes3.Mem)
		want string
	}{
		{"forced claim", func(t *testing.T, m *fakes3.Mem) {
			b := openWatchingNode(t, m.Client("b"), owner.Config{Name: "b", TTL: ttl})
			if _, err := b.Claim(t.Context(), "c", owner.ClaimOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
		}, "now held by node b at epoch 2"},
		{"forced release", func(t *testing.T, m *fakes3.Mem) {
			if _, err := owner.ReleaseCell(t.Context(), m, "c", "", true); err != nil {
				t.Fatal(err)
			}
		}, "released by someone else at epoch 1"},
		{"record deleted", func(t *testing.T, m *fakes3.Mem) {
			if err := m.Delete(t.Context(), owner.CellKey("c"), bucket.Condition{}); err != nil {
				t.Fatal(err)
			}
		}, "own.json was deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := fakes3.NewMem()
				a := openWatchingNode(t, m.Client("a"), owner.Config{Name: "a", TTL: ttl})
				l, err := a.Claim(t.Context(), "c", owner.ClaimOptions{})
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(2500 * time.Millisecond) // a few quiet watch rounds
				if err := l.Err(); err != nil {
					t.Fatalf("lease ended while its record was unchanged: %v", err)
				}
				tc.take(t, m)
				start := time.Now()
				select {
				case <-l.Done():
				case <-time.After(10 * ttl):
					t.Fatalf("the lease is still live %v after the takeover", 10*ttl)
				}
				if waited := time.Since(start); waited > ttl/3 {
					t.Errorf("Done closed %v after the takeover, want within the watch interval %v", waited, ttl/3)
				}
				err = l.Err()
				if errcode.CodeOf(err) != errcode.CodeSuperseded || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Err = %v, want DEED-E021 saying %q", err, tc.want)
				}
				if _, held := a.Lease("c"); held {
					t.Error("the node still lists the lost lease as held")
				}
			})
		})
	}
}

// releaseGate holds the answer to the release of cell c's record until the
// node's record watch has read the released record, which no longer carries
// the claim's nonce.
type releaseGate struct {
	bucket.Bucket
	armed  atomic.Bool
	landed atomic.Bool
	read   chan struct{}
}

func (g *releaseGate) Put(ctx context.Context, key string, body []byte, c bucket.Condition) (string, error) {
	etag, err := g.Bucket.Put(ctx, key, body, c)
	if err == nil && key == owner.CellKey("c") && g.armed.Load() {
		g.landed.Store(true)
		<-g.read
	}
	return etag, err
}

func (g *releaseGate) Get(ctx context.Context, key string, max int64) (bucket.Object, error) {
	o, err := g.Bucket.Get(ctx, key, max)
	if key == owner.CellKey("c") && g.landed.Load() && g.armed.CompareAndSwap(true, false) {
		close(g.read)
	}
	return o, err
}

// The node's own release rewrites the record before it ends the lease; the
// watch must not read that as someone else's release: the lease ends
// released (DEED-E022), not lost.
func TestOwnReleaseIsNotATakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		g := &releaseGate{Bucket: m, read: make(chan struct{})}
		a := openWatchingNode(t, g, owner.Config{Name: "a", TTL: 3 * time.Second})
		l, err := a.Claim(t.Context(), "c", owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		g.armed.Store(true)
		if err := l.Release(t.Context()); err != nil {
			t.Fatalf("release: %v", err)
		}
		if g.armed.Load() {
			t.Fatal("the watch never read the record while the release was under way")
		}
		if err := l.Err(); errcode.CodeOf(err) != errcode.CodeReleased {
			t.Fatalf("after its own release the lease says %v, want DEED-E022", err)
		}
	})
}

// With the watch off (the daemon's choice), a lease learns of a takeover
// only on its data path: it stays live until then.
func TestWatchOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		a := openWatchingNode(t, m.Client("a"), owner.Config{Name: "a", TTL: 3 * time.Second, WatchInterval: -1})
		l, err := a.Claim(t.Context(), "c", owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b := openWatchingNode(t, m.Client("b"), owner.Config{Name: "b", TTL: 3 * time.Second})
		if _, err := b.Claim(t.Context(), "c", owner.ClaimOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		if err := l.Err(); err != nil {
			t.Fatalf("with the watch off the lease ended by itself: %v", err)
		}
	})
}
