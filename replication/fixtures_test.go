package replication_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/replication"
)

var update = flag.Bool("update", false, "rewrite the golden files in ../testdata/ltx")

// The files in testdata/ltx pin the on-disk format: a format change that
// would make existing buckets unreadable fails here first. Regenerate them
// (only for a deliberate, versioned change) with -update.
func TestFormatFixtures(t *testing.T) {
	dir := filepath.Join("..", "testdata", "ltx")
	golden := map[string]*replication.File{
		"records.ltx":   {Kind: replication.KindRecords, Epoch: 3, TxID: 7, Token: "0123456789abcdef0123456789abcdef", Pos: 12, Records: [][]byte{[]byte("hello"), []byte(""), []byte("world")}},
		"seal.ltx":      {Kind: replication.KindSeal, Epoch: 3, TxID: 8, Token: "fedcba9876543210fedcba9876543210", Pos: 15, By: 5},
		"tombstone.ltx": {Kind: replication.KindTombstone, Epoch: 4, TxID: 8, Token: "fedcba9876543210fedcba9876543210", Pos: 15, By: 5},
		"snapshot.ltx":  {Kind: replication.KindSnapshot, Epoch: 5, TxID: 9, Token: "00112233445566778899aabbccddeeff", Pos: 16, State: []byte("state\x00of the app")},
		// Version 2: a timestamp, and idempotency keys on records.
		"records-v2.ltx": {Kind: replication.KindRecords, Epoch: 3, TxID: 7, Token: "0123456789abcdef0123456789abcdef", Pos: 12, Records: [][]byte{[]byte("hello"), []byte(""), []byte("world")},
			TS: 1767225600123, Keys: []replication.TxKey{{Key: "order-17", First: 0, Count: 1}, {Key: "batch 9", First: 1, Count: 2}}},
		"seal-v2.ltx": {Kind: replication.KindSeal, Epoch: 3, TxID: 8, Token: "fedcba9876543210fedcba9876543210", Pos: 15, By: 5, TS: 1767225600123},
	}
	keys := map[string]string{"records.ltx": replication.SlotKey("c", 3, 7), "seal.ltx": replication.SlotKey("c", 3, 8), "tombstone.ltx": replication.SlotKey("c", 4, 8), "snapshot.ltx": replication.SnapshotKey("c", 5, 9),
		"records-v2.ltx": replication.SlotKey("c", 3, 7), "seal-v2.ltx": replication.SlotKey("c", 3, 8)}
	for name, f := range golden {
		body, err := replication.Encode(f)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if *update {
			if err := os.WriteFile(path, body, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(body, want) {
			t.Errorf("%s: encoding changed; the format is versioned, old buckets must stay readable", name)
		}
		got, err := replication.Decode(keys[name], want)
		if err != nil {
			t.Errorf("%s: decode: %v", name, err)
			continue
		}
		if diff := fileDiff(got, f); diff != "" {
			t.Errorf("%s: decoded %s", name, diff)
		}
	}
	// Damaged copies: every one is DEED-E031 naming the key.
	for _, name := range []string{"corrupt-byte.ltx", "truncated.ltx"} {
		path := filepath.Join(dir, name)
		if *update {
			body, _ := os.ReadFile(filepath.Join(dir, "records.ltx"))
			if name == "corrupt-byte.ltx" {
				body[45] ^= 0x01
			} else {
				body = body[:len(body)-3]
			}
			if err := os.WriteFile(path, body, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		body, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		key := keys["records.ltx"]
		_, err = replication.Decode(key, body)
		if errcode.CodeOf(err) != errcode.CodeCorruptTx || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: got %v, want DEED-E031 naming %s", name, err, key)
		}
	}
}

// fileDiff names the first field in which got differs from want, every
// one compared (a record's or a snapshot's bytes included), or "".
func fileDiff(got, want *replication.File) string {
	switch {
	case got.Kind != want.Kind:
		return fmt.Sprintf("kind %v, want %v", got.Kind, want.Kind)
	case got.Epoch != want.Epoch:
		return fmt.Sprintf("epoch %d, want %d", got.Epoch, want.Epoch)
	case got.TxID != want.TxID:
		return fmt.Sprintf("txid %d, want %d", got.TxID, want.TxID)
	case got.Token != want.Token:
		return fmt.Sprintf("token %q, want %q", got.Token, want.Token)
	case got.Pos != want.Pos:
		return fmt.Sprintf("pos %d, want %d", got.Pos, want.Pos)
	case got.By != want.By:
		return fmt.Sprintf("by %d, want %d", got.By, want.By)
	case !bytes.Equal(got.State, want.State):
		return fmt.Sprintf("state %q, want %q", got.State, want.State)
	case len(got.Records) != len(want.Records):
		return fmt.Sprintf("%d records, want %d", len(got.Records), len(want.Records))
	case got.TS != want.TS:
		return fmt.Sprintf("ts %d, want %d", got.TS, want.TS)
	case fmt.Sprint(got.Keys) != fmt.Sprint(want.Keys):
		return fmt.Sprintf("keys %v, want %v", got.Keys, want.Keys)
	}
	for i := range want.Records {
		if !bytes.Equal(got.Records[i], want.Records[i]) {
			return fmt.Sprintf("record %d %q, want %q", i, got.Records[i], want.Records[i])
		}
	}
	return ""
}
