//go:build deedbroken

package replication_test

import (
	"slices"
	"testing"
	"testing/synctest"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// Without the re-check, p opens although epoch 3 exists: n's LIST did not
// show p's late announcement, so nothing fenced epoch 2 at slot 2, and p
// writes p0 there. Readers follow epoch 2 from epoch 1's seal: n's
// acknowledged n0 is lost.
//
//	go test -tags deedbroken ./replication -run 'TestBroken(NoRecheck|RecheckFirst)' -v
func TestBrokenNoRecheckLosesRecords(t *testing.T) {
	defer replication.SetBrokenNoRecheck(true)()
	lateAnnouncerWrites(t)
}

// Re-checking before announcing is the same hole: the check passes before
// n's claim, and the announcement lands after n's LIST.
func TestBrokenRecheckFirstLosesRecords(t *testing.T) {
	defer replication.SetBrokenRecheckFirst(true)()
	lateAnnouncerWrites(t)
}

func lateAnnouncerWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		g := newLedger()
		lg, lp, err := lateAnnouncer(t, m, g)
		if err != nil {
			t.Fatalf("p's open: %v; the broken rule should let it open", err)
		}
		if err := g.append(t.Context(), lg, lp, "p0"); err != nil {
			t.Fatalf("p's append: %v", err)
		}
		recs, err := replication.Read(t.Context(), m, cell, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := data(recs); !slices.Equal(got, []string{"a0", "p0"}) {
			t.Fatalf("read %q; the broken rule should lose n0 behind p0", got)
		}
	})
}

// Following the epoch a seal names (the model's --pointer) jumps from
// e1/2 to e3/2, which is empty: y0 and b0, both acknowledged, are lost.
func TestBrokenPointerRuleLosesRecords(t *testing.T) {
	defer replication.SetBrokenPointer(true)()
	synctest.Test(t, func(t *testing.T) {
		if got := pointerRace(t); !slices.Equal(got, []string{"a0"}) {
			t.Fatalf("read %q; following the seal's epoch should lose y0 and b0", got)
		}
	})
}
