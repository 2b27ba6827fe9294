package replication_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
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

// Version 2 carries a timestamp and idempotency keys; it decodes to what
// was encoded, and only the canonical forms decode.
func TestFormatVersion2(t *testing.T) {
	f := &replication.File{Kind: replication.KindRecords, Epoch: 2, TxID: 4, Token: "tok", Pos: 9,
		Records: [][]byte{[]byte("a"), []byte("b"), []byte("c")}, TS: 1700000000000,
		Keys: []replication.TxKey{{Key: "k1", First: 0, Count: 2}, {Key: "k2", First: 2, Count: 1}}}
	key := replication.SlotKey(cell, 2, 4)
	body, err := replication.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	if body[4] != 2 {
		t.Fatalf("version %d, want 2", body[4])
	}
	g, err := replication.Decode(key, body)
	if err != nil {
		t.Fatal(err)
	}
	if g.TS != f.TS || len(g.Keys) != 2 || g.Keys[0] != f.Keys[0] || g.Keys[1] != f.Keys[1] || len(g.Records) != 3 {
		t.Fatalf("round trip: %+v", g)
	}
	// Without a timestamp or keys a file is version 1, as it always was.
	v1, err := replication.Encode(&replication.File{Kind: replication.KindRecords, Epoch: 2, TxID: 4, Token: "tok", Pos: 9, Records: [][]byte{[]byte("a")}})
	if err != nil || v1[4] != 1 {
		t.Fatalf("unkeyed file without ts: version %d, %v", v1[4], err)
	}
	// Bad key sets are refused by Encode.
	for _, keys := range [][]replication.TxKey{
		{{Key: "", First: 0, Count: 1}},
		{{Key: "a", First: 0, Count: 4}},
		{{Key: "a", First: 1, Count: 1}, {Key: "b", First: 0, Count: 1}},
		{{Key: "a", First: 0, Count: 1}, {Key: "a", First: 1, Count: 1}},
		{{Key: "a\n", First: 0, Count: 1}},
		{{Key: strings.Repeat("k", 256), First: 0, Count: 1}},
	} {
		g := *f
		g.Keys = keys
		if _, err := replication.Encode(&g); errcode.CodeOf(err) != errcode.CodeBadRequest {
			t.Errorf("keys %v: %v, want DEED-E040", keys, err)
		}
	}
	// A seal with a timestamp round-trips; a snapshot refuses one.
	s := &replication.File{Kind: replication.KindSeal, Epoch: 2, TxID: 5, Token: "t", Pos: 12, By: 3, TS: 1700000000001}
	sb, err := replication.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := replication.Decode(replication.SlotKey(cell, 2, 5), sb); err != nil || g.TS != s.TS || g.By != 3 {
		t.Fatalf("seal: %+v %v", g, err)
	}
	if _, err := replication.Encode(&replication.File{Kind: replication.KindSnapshot, Epoch: 2, TxID: 5, Pos: 12, TS: 1}); err == nil {
		t.Fatal("a snapshot with a timestamp was encoded")
	}
	// A version-2 file with neither a timestamp nor keys is not canonical.
	for name, b := range map[string][]byte{
		"v2 records without ts or keys": frameV(2, replication.KindRecords, 3, 2, 4, 9, 1, append(make([]byte, 9), 1, 'a')),
		"v2 seal without ts":            frameV(2, replication.KindSeal, 3, 2, 4, 9, 0, make([]byte, 16)),
		"v2 keys overlapping":           frameV(2, replication.KindRecords, 3, 2, 4, 9, 2, []byte{0, 0, 0, 0, 0, 0, 0, 1, 2, 1, 'a', 0, 2, 1, 'b', 1, 1, 1, 'x', 1, 'y'}),
		"v2 snapshot":                   frameV(2, replication.KindSnapshot, 3, 2, 4, 9, 0, nil),
	} {
		k := key
		if name == "v2 snapshot" {
			k = replication.SnapshotKey(cell, 2, 4)
		}
		if _, err := replication.Decode(k, b); errcode.CodeOf(err) != errcode.CodeCorruptTx {
			t.Errorf("%s: %v, want DEED-E031", name, err)
		}
	}
	// The same framing with valid keys decodes: the cases above fail for
	// the reason they name.
	if _, err := replication.Decode(key, frameV(2, replication.KindRecords, 3, 2, 4, 9, 2, []byte{0, 0, 0, 0, 0, 0, 0, 1, 2, 1, 'a', 0, 1, 1, 'b', 1, 1, 1, 'x', 1, 'y'})); err != nil {
		t.Fatalf("valid v2 frame: %v", err)
	}
}

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"a", "order-17", "with space", strings.Repeat("x", 255), "~!@#"} {
		if err := replication.ValidateKey(k); err != nil {
			t.Errorf("%q: %v", k, err)
		}
	}
	for _, k := range []string{"", " a", "a ", "tab\t", "é", strings.Repeat("x", 256), "nul\x00"} {
		if err := replication.ValidateKey(k); errcode.CodeOf(err) != errcode.CodeBadRequest {
			t.Errorf("%q: %v, want DEED-E040", k, err)
		}
	}
}

// frameV is strict_test.go's frame with a version byte of its own.
func frameV(version byte, kind replication.Kind, tokenLen int, epoch, txid, pos uint64, count uint32, payload []byte) []byte {
	b := frame(kind, tokenLen, epoch, txid, pos, count, payload)
	b[4] = version
	b = b[:len(b)-4]
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}
