package replication_test

import (
	"context"
	"slices"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/storetest"
	"github.com/deedkit/deed/replication"
)

// The main scenarios through the real aws-sdk-go-v2 path, against the HTTP
// fake, (with DEED_VERSITYGW) versitygw and (with DEED_FAKEGCS /
// DEED_AZURITE) fake-gcs-server and Azurite: takeover with a crashed
// claimer (seal + tombstone), a fenced stale append, Close and a clean
// handover; then snapshot, GC and restore.
func TestScenariosOverS3(t *testing.T) {
	for _, tg := range storetest.All(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := context.Background()
			b := tg.Bucket
			handoverOn(t, b, func(string) bucket.Bucket { return b })

			// Epoch 5 on top: snapshot, GC the sealed epochs, restore.
			l := claim(t, b, "e", false)
			lg := open(t, b, l)
			g := newLedger()
			appendN(t, g, lg, l, "e", 2)
			h := lg.Head()
			if _, err := lg.Snapshot(ctx, l, h.Next-1, []byte("state")); err != nil {
				t.Fatal(err)
			}
			appendN(t, g, lg, l, "f", 1)
			if err := lg.Close(ctx); err != nil {
				t.Fatal(err)
			}
			rep, err := replication.GC(ctx, b, cell, replication.GCOptions{DropKeyWindow: true})
			if err != nil || len(rep.Deleted) == 0 {
				t.Fatalf("gc: %+v %v", rep, err)
			}
			var state string
			var got []string
			if _, err := replication.Restore(ctx, b, cell,
				func(s replication.Snapshot) error { state = string(s.State); return nil },
				func(r replication.Record) error { got = append(got, string(r.Data)); return nil }); err != nil {
				t.Fatal(err)
			}
			if state != "state" || !slices.Equal(got, []string{"f0"}) {
				t.Fatalf("restore: %q %q", state, got)
			}
		})
	}
}
