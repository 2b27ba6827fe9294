package owner_test

import (
	"context"
	"testing"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// A claim on a release that names its end announces its own epoch in its
// record; every later write of own.json carries it (a release without an
// end, this node's own claim on that release, a claim by a peer); a
// release that names an end would clear it, and a hint of a release that
// carries it is not handed to a peer.
func TestClaimRecordAnnouncesItsEpoch(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	m.Set(owner.CellKey("c"), []byte(`{"node":"","epoch":3,"nonce":"n","at_ms":1,"end":{"txid":5,"pos":5}}`))
	a, err := owner.NewNode(m, owner.Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	inspect := func(what string, wantEpoch, wantAnn uint64) {
		t.Helper()
		rec, _, err := owner.Inspect(ctx, m, "c")
		if err != nil || rec.Epoch != wantEpoch || rec.Announces != wantAnn {
			t.Fatalf("%s: record %+v (%v), want epoch %d announcing %d", what, rec, err, wantEpoch, wantAnn)
		}
	}
	l, err := a.Claim(ctx, "c", owner.ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !l.AnnouncedByClaim() || l.Unmarked() != 0 {
		t.Fatalf("claim on a release with its end: announced %v, unmarked %d; want true, 0", l.AnnouncedByClaim(), l.Unmarked())
	}
	if p, ok := l.TakePrevEnd(); !ok || p.Own || p.End != (owner.End{TxID: 5, Pos: 5}) {
		t.Fatalf("prev end %+v %v: want slot 5, not this node's own", p, ok)
	}
	inspect("the claim", 4, 4)
	if err := l.Release(ctx); err != nil { // no log: no end
		t.Fatal(err)
	}
	inspect("a release without an end", 4, 4)
	if h, ok := a.ReleasedHint("c"); ok || h.ReleasedETag != "" {
		t.Fatalf("the hint of a release carrying announces was handed out: %+v", h)
	}
	l, err = a.Claim(ctx, "c", owner.ClaimOptions{}) // its own hint: one If-Match PUT
	if err != nil {
		t.Fatal(err)
	}
	if l.AnnouncedByClaim() || l.Unmarked() != 4 {
		t.Fatalf("claim on a release without an end: announced %v, unmarked %d; want false, 4", l.AnnouncedByClaim(), l.Unmarked())
	}
	inspect("this node's claim on its own release", 5, 4)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := owner.NewNode(m, owner.Config{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	l, err = b.Claim(ctx, "c", owner.ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Unmarked() != 4 {
		t.Fatalf("a peer's claim knows unmarked epoch %d, want 4", l.Unmarked())
	}
	inspect("a peer's claim", 6, 4)
	l.NoteEnd(9, 9, 0) // as a log's Close does after its seal landed
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	inspect("a release that names its end", 6, 0)
	if h, ok := b.ReleasedHint("c"); !ok || h.End == nil || *h.End != (owner.End{TxID: 9, Pos: 9}) {
		t.Fatalf("the hint of a release naming its end: %+v %v", h, ok)
	}
}

// A record from before the field reads as announcing nothing; one that
// announces an epoch above its own is not one deed writes.
func TestRecordAnnouncesIsChecked(t *testing.T) {
	rec, err := owner.ParseRecord("k", []byte(`{"node":"","epoch":2,"nonce":"n","at_ms":1}`))
	if err != nil || rec.Announces != 0 {
		t.Fatalf("older record: %+v %v", rec, err)
	}
	_, err = owner.ParseRecord("k", []byte(`{"node":"","epoch":2,"nonce":"n","at_ms":1,"announces":3}`))
	if errcode.CodeOf(err) != errcode.CodeCorruptOwner {
		t.Fatalf("announces above the epoch: %v, want DEED-E030", err)
	}
}
