package owner_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// A node's weight, draining flag and held-cell count reach its peers on the
// renewals it makes anyway: no write of its own, and nothing a peer judges
// liveness by.
func TestNodeLeaseAdvertisesWeightDrainingAndCells(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		a, err := owner.NewNode(m.Client("a"), owner.Config{Name: "a", Addr: "http://a", TTL: 3 * time.Second, Weight: 2.5})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer closeNode(a)
		for _, cell := range []string{"c1", "c2"} {
			if _, err := a.Claim(t.Context(), cell, owner.ClaimOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		a.SetDraining(true)
		time.Sleep(2 * time.Second) // at least one renewal (every TTL/3)
		obs := owner.NewObserver(m.Client("b"), owner.Params{TTL: 3 * time.Second, Margin: 300 * time.Millisecond})
		if err := obs.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		var got *owner.NodeView
		for _, v := range obs.View() {
			if v.Node == "a" {
				got = &v
			}
		}
		if got == nil {
			t.Fatal("node a not observed")
		}
		if got.Weight != 2.5 || !got.Draining || got.Cells != 2 || !got.Alive {
			t.Fatalf("view of a = %+v, want weight 2.5, draining, 2 cells, alive", *got)
		}
	})
}

func TestNodeWeightOutOfRangeIsRefused(t *testing.T) {
	m := fakes3.NewMem()
	for _, w := range []float64{-1, owner.MaxWeight + 1} {
		_, err := owner.NewNode(m.Client("a"), owner.Config{Name: "a", Weight: w})
		if errcode.CodeOf(err) != errcode.CodeBadRequest {
			t.Errorf("weight %v: got %v, want DEED-E040", w, err)
		}
	}
}

// A lease that advertises a weight or cell count no node writes is corrupt,
// and its other fields (the address, the draining flag) are not believed.
func TestNodeLeaseWithImpossibleWeightIsCorrupt(t *testing.T) {
	for name, body := range map[string]string{
		"weight":   `{"node":"x","incarnation":"i","addr":"http://x","ttl_ms":3000,"seq":1,"at_ms":1,"weight":1e9,"cells":0}`,
		"negative": `{"node":"x","incarnation":"i","addr":"http://x","ttl_ms":3000,"seq":1,"at_ms":1,"weight":-2,"cells":0}`,
		"cells":    `{"node":"x","incarnation":"i","addr":"http://x","ttl_ms":3000,"seq":1,"at_ms":1,"cells":-1}`,
	} {
		t.Run(name, func(t *testing.T) {
			m := fakes3.NewMem()
			m.Set(owner.NodeKey("x"), []byte(body))
			obs := owner.NewObserver(m.Client("b"), owner.Params{TTL: 3 * time.Second, Margin: 300 * time.Millisecond})
			if err := obs.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
			v := obs.View()
			if len(v) != 1 || v[0].Corrupt == "" || v[0].Addr != "" {
				t.Fatalf("view = %+v, want one corrupt lease with no address believed", v)
			}
		})
	}
}
