package owner_test

import (
	"testing"

	"github.com/deedkit/deed/bucket/storetest"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3/s3test"
	"github.com/deedkit/deed/owner"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// The claim/release/takeover scenarios through the real aws-sdk-go-v2 path,
// against the HTTP fake, (with DEED_VERSITYGW) versitygw, and (with
// DEED_FAKEGCS / DEED_AZURITE) fake-gcs-server and Azurite.
func TestOwnershipOverS3(t *testing.T) {
	for _, tg := range storetest.All(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := t.Context()
			a := newNode(t, tg.Bucket, "a")
			b := newNode(t, tg.Bucket, "b")
			if err := a.Open(ctx); err != nil {
				t.Fatal(err)
			}
			defer closeNode(a)
			if err := b.Open(ctx); err != nil {
				t.Fatal(err)
			}
			defer closeNode(b)

			la, err := a.Claim(ctx, "cell-1", owner.ClaimOptions{})
			if err != nil || la.Epoch() != 1 {
				t.Fatalf("claim: %v", err)
			}
			_, err = b.Claim(ctx, "cell-1", owner.ClaimOptions{})
			mustCode(t, err, errcode.CodeHeld)

			// Re-entry by a restarted a bumps the epoch and fences la.
			a2 := newNode(t, tg.Bucket, "a")
			la2, err := a2.Claim(ctx, "cell-1", owner.ClaimOptions{})
			if err != nil || la2.Epoch() != 2 {
				t.Fatalf("re-entry: %v", err)
			}
			mustCode(t, la.Release(ctx), errcode.CodeSuperseded)

			// Forced takeover by b; the stale holder cannot act.
			lb, err := b.Claim(ctx, "cell-1", owner.ClaimOptions{Force: true})
			if err != nil || lb.Epoch() != 3 {
				t.Fatalf("forced claim: %v", err)
			}
			mustCode(t, la2.Release(ctx), errcode.CodeSuperseded)

			// Release lets the next claimer in at once.
			if err := lb.Release(ctx); err != nil {
				t.Fatal(err)
			}
			l, err := a.Claim(ctx, "cell-1", owner.ClaimOptions{})
			if err != nil || l.Epoch() != 4 {
				t.Fatalf("claim after release: %v", err)
			}
			_, err = owner.ReleaseCell(ctx, tg.Bucket, "cell-1", "b", false)
			mustCode(t, err, errcode.CodeNotHolder)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			rec, ok, err := owner.Inspect(ctx, tg.Bucket, "cell-1")
			if err != nil || !ok || !rec.Released() || rec.Epoch != 4 {
				t.Fatalf("final record %+v %v", rec, err)
			}
		})
	}
}
