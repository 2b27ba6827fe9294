package replication_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// Found by the simulation (seeds 3253 and 5009): a write whose first PUT
// was still travelling when the writer gave up on it, and whose retry
// landed, can land after GC deleted the file — create-only does not keep a
// deleted key from being written again. The file is back, alone, below
// the hole GC left above it. A read of positions below the snapshot picked
// it as its start, met the hole at the next slot, found its start still
// there (GC deletes in txid order, so a hole above a file that exists
// looked like the real end of the chain), and returned the log cut short,
// without an error. A slot at or below a snapshot's txid is never the end
// of the chain — the snapshot covers it, so the chain ran past it — so the
// read now reports those positions as compacted (ErrCompacted), as it does
// when their files are simply gone.
func TestReadAboveAFileWrittenAgainAfterGC(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	la := claim(t, m, "a", false)
	logA := open(t, m, la)
	g := newLedger()
	appendN(t, g, logA, la, "a", 4) // txids 1..4
	first := replication.SlotKey(cell, 1, 1)
	body, _ := m.Bytes(first) // what a late-landing PUT of slot 1 carries
	if _, err := logA.Snapshot(ctx, la, 3, []byte("state@3")); err != nil {
		t.Fatal(err)
	}
	if err := logA.Close(ctx); err != nil { // seals e1/5
		t.Fatal(err)
	}
	rep, err := replication.GC(ctx, m, cell, replication.GCOptions{DropKeyWindow: true})
	if err != nil || !slices.Contains(rep.Deleted, first) {
		t.Fatalf("gc: %q %v", rep.Deleted, err)
	}
	if _, err := m.Put(ctx, first, body, bucket.IfAbsent); err != nil { // the straggler lands
		t.Fatal(err)
	}

	for _, after := range []replication.Pos{0, 1, 2} {
		recs, err := replication.Read(ctx, m, cell, after, 0)
		if !errors.Is(err, replication.ErrCompacted) {
			t.Fatalf("read after %d: %q, %v; want an error wrapping ErrCompacted", after, data(recs), err)
		}
		mustCode(t, err, errcode.CodeBadRequest)
	}
	// Positions after the snapshot read as before.
	recs, err := replication.Read(ctx, m, cell, 3, 0)
	if err != nil || !slices.Equal(data(recs), []string{"a3"}) {
		t.Fatalf("read after 3: %q %v", data(recs), err)
	}
}
