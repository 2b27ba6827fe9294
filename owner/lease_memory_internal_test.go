package owner

import (
	"maps"
	"sync"
	"testing"
	"testing/synctest"
	"unsafe"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

// A held lease that nobody waits on keeps no Done channel (a daemon holds
// tens of thousands of idle ones); Done made before the end closes at the
// end, and Done asked for afterwards is closed at once, after the node has
// forgotten the lease.
func TestLeaseDoneMadeOnDemand(t *testing.T) {
	n, err := NewNode(fakes3.NewMem(), Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := n.Claim(t.Context(), "idle", ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waited, err := n.Claim(t.Context(), "waited", ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if idle.done != nil {
		t.Fatal("a claim made a Done channel nobody asked for")
	}
	before := waited.Done()
	select {
	case <-before:
		t.Fatal("Done closed while the lease is held")
	default:
	}
	for _, l := range []*Lease{idle, waited} {
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	<-before
	<-idle.Done()
	if idle.done != nil {
		t.Fatal("Done after the end made a channel")
	}
	if err := idle.Err(); errcode.CodeOf(err) != errcode.CodeReleased {
		t.Fatalf("Err after release: %v", err)
	}
	if held := n.Held(); len(held) != 0 {
		t.Fatalf("ended leases still listed as held: %v", held)
	}
}

// A Lease fits the 128-byte size class (a daemon keeps one per held cell):
// it names its node through the node that claimed it rather than a copy of
// the name, and keeps what AfterEnd registered as one func.
func TestLeaseIsSmall(t *testing.T) {
	if size := unsafe.Sizeof(Lease{}); size > 128 {
		t.Errorf("Lease is %d bytes, want at most 128", size)
	}
}

// Every func AfterEnd registered runs once the lease ends, each in its own
// goroutine (one blocking does not hold up the others), and one registered
// after the end runs at once.
func TestAfterEndRunsEveryFunc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, err := NewNode(fakes3.NewMem(), Config{Name: "a"})
		if err != nil {
			t.Fatal(err)
		}
		l, err := n.Claim(t.Context(), "c", ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Node() != "a" {
			t.Fatalf("Node() = %q, want a", l.Node())
		}
		var mu sync.Mutex
		ran := map[int]int{}
		block := make(chan struct{})
		for i := range 3 {
			l.AfterEnd(func() {
				mu.Lock()
				ran[i]++
				mu.Unlock()
				if i == 0 {
					<-block // must not keep 1 and 2 from running
				}
			})
		}
		synctest.Wait()
		if len(ran) != 0 {
			t.Fatalf("ran before the end: %v", ran)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		l.AfterEnd(func() { mu.Lock(); ran[3]++; mu.Unlock() })
		synctest.Wait()
		close(block)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if want := map[int]int{0: 1, 1: 1, 2: 1, 3: 1}; !maps.Equal(ran, want) {
			t.Fatalf("ran %v, want %v", ran, want)
		}
	})
}
