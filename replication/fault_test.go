package replication_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// handover runs a scenario that exercises every kind of slot write: records
// (group commits), a seal and a tombstone by a takeover, a stale append
// that meets the seal, a Close seal, and a clean handover. It checks the
// promises at the end and returns the records read.
func handover(t *testing.T, m *fakes3.Mem) []string {
	t.Helper()
	return handoverOn(t, m, m.Client)
}

func handoverOn(t *testing.T, m bucket.Bucket, client func(string) bucket.Bucket) []string {
	t.Helper()
	ctx := context.Background()
	g := newLedger()
	a, b, c, d := client("a"), client("b"), client("c"), client("d")

	la := claim(t, a, "a", false)
	logA := open(t, a, la)
	appendN(t, g, logA, la, "a", 3)
	claim(t, b, "b", true) // crashes before sealing
	appendN(t, g, logA, la, "a-late", 1)
	lc := claim(t, c, "c", true)
	logC := open(t, c, lc) // seals e1, tombstones e2
	mustCode(t, g.append(ctx, logA, la, "a-stale"), errcode.CodeSuperseded)
	appendN(t, g, logC, lc, "c", 2)
	if err := logC.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := lc.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	ld := claim(t, d, "d", false)
	logD := open(t, d, ld)
	appendN(t, g, logD, ld, "d", 1)
	if err := logD.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	got := data(g.check(t, m))
	want := []string{"a0", "a1", "a2", "a-late0", "c0", "c1", "d0"}
	if !slices.Equal(got, want) {
		t.Fatalf("read %q, want %q", got, want)
	}
	return got
}

// Lost responses, errors before apply, hung requests, 409s and 503s on
// slot PUTs at every step of append, seal and tombstone never lose an
// acknowledged record or duplicate one. The fault walks through every PUT
// index of the scenario (Rule.Skip), once and then three times in a row;
// read faults walk through every GET the same way.
func TestFaultAtEveryWrite(t *testing.T) {
	prefix := replication.LogPrefix(cell)
	count := func(op fakes3.Op) int {
		n := 0
		synctest.Test(t, func(t *testing.T) {
			m := fakes3.NewMem()
			m.Inject(fakes3.Rule{Op: op, KeyPrefix: prefix, Match: func(fakes3.Op, string) bool { n++; return false }})
			handover(t, m)
		})
		return n
	}
	puts, gets := count(fakes3.OpPut), count(fakes3.OpGet)
	if puts < 8 || gets < 8 {
		t.Fatalf("scenario made only %d slot PUTs and %d GETs", puts, gets)
	}
	t.Logf("scenario: %d slot PUTs, %d slot GETs", puts, gets)
	cases := []struct {
		op     fakes3.Op
		n      int
		faults []fakes3.Fault
	}{
		{fakes3.OpPut, puts, []fakes3.Fault{fakes3.ErrAfter, fakes3.ErrBefore, fakes3.Drop, fakes3.Conflict, fakes3.SlowDown}},
		{fakes3.OpGet, gets, []fakes3.Fault{fakes3.ErrBefore, fakes3.Drop}},
	}
	for _, tc := range cases {
		for _, f := range tc.faults {
			for _, times := range []int{1, 3} {
				for skip := 0; skip < tc.n; skip++ {
					name := fmt.Sprintf("%s/%s/x%d/at%d", tc.op, f, times, skip)
					t.Run(name, func(t *testing.T) {
						synctest.Test(t, func(t *testing.T) {
							m := fakes3.NewMem()
							m.Inject(fakes3.Rule{Op: tc.op, KeyPrefix: prefix, Fault: f, Skip: skip, Times: times})
							handover(t, m)
						})
					})
				}
			}
		}
	}
}
