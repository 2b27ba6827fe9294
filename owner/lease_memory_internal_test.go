package owner

import (
	"testing"

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
