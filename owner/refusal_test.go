package owner_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// deniedPuts answers every Put the way S3 answers a request whose
// credentials may not write: 403, nothing applied.
type deniedPuts struct{ bucket.Bucket }

func (d deniedPuts) Put(ctx context.Context, key string, body []byte, cond bucket.Condition) (string, error) {
	return "", &bucket.OpError{Op: "put", Key: key, Kind: bucket.ErrAccessDenied, Status: 403, Err: fmt.Errorf("AccessDenied")}
}

// A conditional write the store refused as such (403) was not applied: a
// claim says so (DEED-E041), whether its first request is the create-only
// guess, a write after a read, or the If-Match guess after its own release.
// It is never "outcome unknown" (DEED-E012), and it does not keep asking.
func TestClaimRefusedByTheStoreIsNotApplied(t *testing.T) {
	for _, existing := range []bool{false, true} {
		t.Run(fmt.Sprintf("record exists=%v", existing), func(t *testing.T) {
			m := fakes3.NewMem()
			if existing {
				a := newNode(t, m.Client("a"), "a")
				l, err := a.Claim(t.Context(), "c", owner.ClaimOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Release(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := m.Bytes(owner.CellKey("c"))
			n := newNode(t, deniedPuts{m.Client("b")}, "b")
			start := m.Counts()
			_, err := n.Claim(t.Context(), "c", owner.ClaimOptions{})
			mustCode(t, err, errcode.CodeUnauthorized)
			if got := m.Counts().Sub(start); got.Get > 1 {
				t.Errorf("a refused claim read own.json %d times: %+v", got.Get, got)
			}
			if after, _ := m.Bytes(owner.CellKey("c")); string(after) != string(before) {
				t.Errorf("record changed: %s → %s", before, after)
			}
		})
	}
}
