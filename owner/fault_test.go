package owner_test

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// 20 live nodes race for one cell: exactly one wins, the rest see it held.
func TestClaimRaceOneWinner(t *testing.T) {
	for round := range 5 {
		synctest.Test(t, func(t *testing.T) {
			m := fakes3.NewMem()
			m.Inject(fakes3.Rule{Op: fakes3.OpGet, Latency: time.Millisecond}) // widen the read→write window
			nodes := make([]*owner.Node, 20)
			for i := range nodes {
				nodes[i] = openNode(t, m, fmt.Sprintf("n%02d", i))
			}
			var mu sync.Mutex
			var winners []*owner.Lease
			var wg sync.WaitGroup
			for _, n := range nodes {
				wg.Go(func() {
					l, err := n.Claim(t.Context(), "c", owner.ClaimOptions{})
					if err != nil {
						if errcode.CodeOf(err) != errcode.CodeHeld {
							t.Errorf("round %d: %v", round, err)
						}
						return
					}
					mu.Lock()
					winners = append(winners, l)
					mu.Unlock()
				})
			}
			wg.Wait()
			if len(winners) != 1 || winners[0].Epoch() != 1 {
				t.Fatalf("round %d: %d winners", round, len(winners))
			}
			if r := record(t, m, "c"); r.Node != winners[0].Node() || r.Nonce != winners[0].Token() {
				t.Fatalf("record %+v does not match the winner", r)
			}
		})
	}
}

// 20 forced claimers: several may win in turn, but never two in one epoch,
// and every superseded winner's lease fails when it tries to act.
func TestForcedClaimRaceEpochsUnique(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		m.Inject(fakes3.Rule{Op: fakes3.OpGet, Latency: time.Millisecond})
		var mu sync.Mutex
		var wins []*owner.Lease
		var wg sync.WaitGroup
		for i := range 20 {
			n := newNode(t, m, fmt.Sprintf("n%02d", i))
			wg.Go(func() {
				l, err := n.Claim(t.Context(), "c", owner.ClaimOptions{Force: true})
				if err != nil {
					if errcode.CodeOf(err) != errcode.CodeUnavailable { // gave up after contention
						t.Error(err)
					}
					return
				}
				mu.Lock()
				wins = append(wins, l)
				mu.Unlock()
			})
		}
		wg.Wait()
		sort.Slice(wins, func(i, j int) bool { return wins[i].Epoch() < wins[j].Epoch() })
		for i := 1; i < len(wins); i++ {
			if wins[i].Epoch() == wins[i-1].Epoch() {
				t.Fatalf("two claims of epoch %d", wins[i].Epoch())
			}
		}
		last := wins[len(wins)-1]
		if r := record(t, m, "c"); r.Epoch != last.Epoch() || r.Nonce != last.Token() {
			t.Fatalf("record %+v, newest winner epoch %d", r, last.Epoch())
		}
		for _, l := range wins[:len(wins)-1] {
			mustCode(t, l.Release(t.Context()), errcode.CodeSuperseded)
		}
		if err := last.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// Each fault on the claim's PUT: the claim ends applied exactly once (the
// record's epoch is 1 and carries the lease's nonce) or fails cleanly.
func TestClaimFaults(t *testing.T) {
	cases := []struct {
		name  string
		rule  fakes3.Rule
		ok    bool
		code  errcode.Code
		puts  int64 // PUTs the claim sent
		epoch uint64
	}{
		{"409 then ok", fakes3.Rule{Op: fakes3.OpPut, Fault: fakes3.Conflict, Times: 2}, true, "", 3, 1},
		{"500 before apply", fakes3.Rule{Op: fakes3.OpPut, Fault: fakes3.ErrBefore, Times: 1}, true, "", 2, 1},
		{"503 before apply", fakes3.Rule{Op: fakes3.OpPut, Fault: fakes3.SlowDown, Times: 1}, true, "", 2, 1},
		{"lost response", fakes3.Rule{Op: fakes3.OpPut, Fault: fakes3.ErrAfter, Times: 1}, true, "", 1, 1},
		{"lost response, read-back fails twice", fakes3.Rule{Op: fakes3.OpPut, Fault: fakes3.ErrAfter, Times: 1}, true, "", 1, 1},
		// A hung PUT is cut by the per-request timeout (the S3 client's
		// conditional-write timeout; here withTimeout), then resolved by reading.
		{"hung request", fakes3.Rule{Op: fakes3.OpPut, Fault: fakes3.Drop, Times: 1}, true, "", 2, 1},
		// The claim's first request is the create-only PUT: with the
		// store down its outcome cannot be learned, which is DEED-E012.
		{"store down", fakes3.Rule{Fault: fakes3.ErrBefore}, false, errcode.CodeAmbiguous, 0, 0},
		{"writes always ambiguous, reads down", fakes3.Rule{Op: fakes3.OpPut, Fault: fakes3.ErrBefore}, false, errcode.CodeUnavailable, 8, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := fakes3.NewMem()
				m.Inject(c.rule)
				if c.name == "lost response, read-back fails twice" {
					m.Inject(fakes3.Rule{Op: fakes3.OpGet, Fault: fakes3.SlowDown, Skip: 1, Times: 2})
				}
				a := newNode(t, withTimeout(m, time.Second), "a")
				l, err := a.Claim(t.Context(), "c", owner.ClaimOptions{})
				if !c.ok {
					mustCode(t, err, c.code)
					if _, ok := m.Bytes(owner.CellKey("c")); ok {
						t.Fatal("a failed claim left a record")
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				r := record(t, m, "c")
				if l.Epoch() != c.epoch || r.Epoch != c.epoch || r.Nonce != l.Token() {
					t.Fatalf("lease epoch %d, record %+v", l.Epoch(), r)
				}
				if got := m.Counts().Put; c.puts != 0 && got != c.puts {
					t.Fatalf("%d PUTs, want %d", got, c.puts)
				}
				if err := l.Release(t.Context()); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// Lost responses on the release are recognised by the nonce.
func TestReleaseLostResponse(t *testing.T) {
	m := fakes3.NewMem()
	a := newNode(t, m, "a")
	l, _ := a.Claim(t.Context(), "c", owner.ClaimOptions{})
	m.Inject(fakes3.Rule{Op: fakes3.OpPut, Fault: fakes3.ErrAfter, Times: 1})
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	mustCode(t, l.Err(), errcode.CodeReleased)
	if r := record(t, m, "c"); !r.Released() {
		t.Fatalf("%+v", r)
	}
}

// A partitioned node cannot claim, and its failed attempt writes nothing.
func TestPartitionedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		a := openNode(t, m, "a")
		b := openNode(t, m, "b")
		m.Partition("a", true)
		// The create-only PUT went out first; a reset connection leaves its
		// outcome unknown, and the read-back cannot get through either.
		_, err := a.Claim(t.Context(), "c", owner.ClaimOptions{})
		mustCode(t, err, errcode.CodeAmbiguous)
		if _, ok := m.Bytes(owner.CellKey("c")); ok {
			t.Fatal("partitioned claim wrote")
		}
		if _, err := b.Claim(t.Context(), "c", owner.ClaimOptions{}); err != nil {
			t.Fatal(err)
		}
		m.Partition("a", false)
	})
}
