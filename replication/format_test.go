package replication_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

func TestFormatRoundTrip(t *testing.T) {
	files := []*replication.File{
		{Kind: replication.KindRecords, Epoch: 3, TxID: 9, Token: "tok", Pos: 17, Records: [][]byte{[]byte("a"), {}, bytes.Repeat([]byte("x"), 300)}},
		{Kind: replication.KindSeal, Epoch: 3, TxID: 9, Token: "t2", Pos: 20, By: 5},
		{Kind: replication.KindTombstone, Epoch: 4, TxID: 9, Token: "t2", Pos: 20, By: 5},
		{Kind: replication.KindSnapshot, Epoch: 5, TxID: 9, Token: "t3", Pos: 20, State: []byte("state")},
	}
	for _, f := range files {
		key := replication.SlotKey(cell, f.Epoch, f.TxID)
		if f.Kind == replication.KindSnapshot {
			key = replication.SnapshotKey(cell, f.Epoch, f.TxID)
		}
		body, err := replication.Encode(f)
		if err != nil {
			t.Fatal(err)
		}
		g, err := replication.Decode(key, body)
		if err != nil {
			t.Fatalf("%s: %v", f.Kind, err)
		}
		if g.Kind != f.Kind || g.Epoch != f.Epoch || g.TxID != f.TxID || g.Token != f.Token || g.Pos != f.Pos || g.By != f.By ||
			!bytes.Equal(g.State, f.State) || len(g.Records) != len(f.Records) {
			t.Fatalf("round trip of %s: got %+v want %+v", f.Kind, g, f)
		}
		for i := range f.Records {
			if !bytes.Equal(g.Records[i], f.Records[i]) {
				t.Fatalf("record %d differs", i)
			}
		}
		// A file is only valid at its own slot.
		if _, err := replication.Decode(replication.SlotKey(cell, f.Epoch+1, f.TxID), body); errcode.CodeOf(err) != errcode.CodeCorruptTx {
			t.Fatalf("%s decoded at another slot: %v", f.Kind, err)
		}
	}
}

// Every single flipped byte and every truncation is DEED-E031 naming the key.
func TestDecodeDamage(t *testing.T) {
	f := &replication.File{Kind: replication.KindRecords, Epoch: 1, TxID: 1, Token: "tok", Pos: 1, Records: [][]byte{[]byte("hello"), []byte("world")}}
	body, err := replication.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	key := replication.SlotKey(cell, 1, 1)
	check := func(what string, b []byte) {
		t.Helper()
		_, err := replication.Decode(key, b)
		mustCode(t, err, errcode.CodeCorruptTx)
		if !strings.Contains(err.Error(), key) {
			t.Fatalf("%s: %q does not name %s", what, err, key)
		}
	}
	for i := range body {
		for _, bit := range []byte{0x01, 0x80} {
			b := bytes.Clone(body)
			b[i] ^= bit
			check("flip", b)
		}
		check("truncate", body[:i])
	}
	check("extend", append(bytes.Clone(body), 0))
}

// A damaged file in the chain stops Read, Restore and a new owner's Open
// with DEED-E031 naming the key; nothing after it is returned.
func TestCorruptFileInChain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"flipped byte", func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b }},
		{"truncated", func(b []byte) []byte { return b[:len(b)-3] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			m := fakes3.NewMem()
			la := claim(t, m, "a", false)
			lg := open(t, m, la)
			g := newLedger()
			appendN(t, g, lg, la, "r", 5)
			key := replication.SlotKey(cell, 1, 3)
			b, ok := m.Bytes(key)
			if !ok {
				t.Fatalf("%s missing", key)
			}
			m.Set(key, tc.damage(b))

			_, err := replication.Read(ctx, m, cell, 0, 0)
			mustCode(t, err, errcode.CodeCorruptTx)
			if !strings.Contains(err.Error(), key) {
				t.Fatalf("%q does not name %s", err, key)
			}
			recs, err := replication.Read(ctx, m, cell, 0, 2)
			if err != nil || len(recs) != 2 {
				t.Fatalf("the records before the damage: %d, %v", len(recs), err)
			}
			_, err = replication.Restore(ctx, m, cell, nil, func(replication.Record) error { return nil })
			mustCode(t, err, errcode.CodeCorruptTx)
			if !strings.Contains(err.Error(), key) {
				t.Fatalf("%q does not name %s", err, key)
			}
			_, err = lg.Read(ctx, 0, 0, true)
			mustCode(t, err, errcode.CodeCorruptTx)
		})
	}
}
