package replication_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/benchtest"
	"github.com/deedkit/deed/replication"
)

// frame builds a .ltx file the way Encode lays it out, but from raw header
// fields, so a test can write what Encode never would.
func frame(kind replication.Kind, tokenLen int, epoch, txid, pos uint64, count uint32, payload []byte) []byte {
	b := make([]byte, 40)
	copy(b, "DLTX")
	b[4], b[5] = 1, byte(kind)
	binary.BigEndian.PutUint16(b[6:], uint16(tokenLen))
	binary.BigEndian.PutUint64(b[8:], epoch)
	binary.BigEndian.PutUint64(b[16:], txid)
	binary.BigEndian.PutUint64(b[24:], pos)
	binary.BigEndian.PutUint32(b[32:], count)
	binary.BigEndian.PutUint32(b[36:], uint32(len(payload)))
	b = append(b, bytes.Repeat([]byte("t"), tokenLen)...)
	b = append(b, payload...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// Decode accepts only what Encode writes. Each of these used to decode:
// well framed, checksummed, and yet no writer produces them.
func TestDecodeRefusesWhatEncodeNeverWrites(t *testing.T) {
	const E, T = 1, 1
	key := replication.SlotKey(cell, E, T)
	// Sanity: the frame helper matches Encode for a valid file.
	want, err := replication.Encode(&replication.File{Kind: replication.KindRecords, Epoch: E, TxID: T, Token: "ttt", Pos: 5, Records: [][]byte{[]byte("ab")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := frame(replication.KindRecords, 3, E, T, 5, 1, []byte{2, 'a', 'b'}); !bytes.Equal(got, want) {
		t.Fatalf("frame differs from Encode:\n%x\n%x", got, want)
	}
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"non-minimal record length", frame(replication.KindRecords, 3, E, T, 5, 1, []byte{0x82, 0x00, 'a', 'b'})},
		{"non-minimal empty record", frame(replication.KindRecords, 3, E, T, 5, 1, []byte{0x80, 0x00})},
		{"record length past 64 bits", frame(replication.KindRecords, 3, E, T, 5, 1, append(bytes.Repeat([]byte{0xff}, 10), 0x01))},
		{"positions wrap around", frame(replication.KindRecords, 3, E, T, math.MaxUint64, 2, []byte{0, 0})},
		{"position of the last record has no successor", frame(replication.KindRecords, 3, E, T, math.MaxUint64, 1, []byte{0})},
		{"token over MaxTokenLen", frame(replication.KindRecords, replication.MaxTokenLen+1, E, T, 5, 1, []byte{0})},
		{"txid without a successor", frame(replication.KindSeal, 3, E, math.MaxUint64, 5, 0, make([]byte, 8))},
		{"over MaxFileLen", frame(replication.KindSnapshot, 3, E, T, 5, 0, make([]byte, replication.MaxFileLen))},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := key
			if c.name == "txid without a successor" {
				k = replication.SlotKey(cell, E, math.MaxUint64)
			}
			if c.name == "over MaxFileLen" {
				k = replication.SnapshotKey(cell, E, T)
			}
			f, err := replication.Decode(k, c.body)
			mustCode(t, err, errcode.CodeCorruptTx)
			if f != nil || !strings.Contains(err.Error(), k) {
				t.Fatalf("decoded %+v, error %v (want it to name %s)", f, err, k)
			}
		})
	}
}

// Encode refuses to build a file a reader would refuse.
func TestEncodeRefusesFilesOverMaxFileLen(t *testing.T) {
	_, err := replication.Encode(&replication.File{Kind: replication.KindSnapshot, Epoch: 1, TxID: 1, Token: "t", Pos: 1, State: make([]byte, replication.MaxFileLen)})
	mustCode(t, err, errcode.CodeBadRequest)
}

// A 64 MiB object in a slot is DEED-E031 naming the key, refused from its
// size: no read holds more than MaxFileLen of it (one read of 512 MiB used
// to take the daemon to 1.46 GB).
func TestOversizedSlotObject(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	la := claim(t, m, "a", false)
	lg := open(t, m, la)
	appendN(t, newLedger(), lg, la, "r", 2)
	key := replication.SlotKey(cell, 1, 3)
	m.Set(key, make([]byte, 64<<20))
	b := &benchtest.Counted{B: m}
	_, err := replication.Read(ctx, b, cell, 0, 0)
	mustCode(t, err, errcode.CodeCorruptTx)
	if !strings.Contains(err.Error(), key) {
		t.Fatalf("%q does not name %s", err, key)
	}
	_, err = replication.Restore(ctx, b, cell, nil, func(replication.Record) error { return nil })
	mustCode(t, err, errcode.CodeCorruptTx)
	if got := b.LargestBody(); got > replication.MaxFileLen {
		t.Fatalf("a read held %d bytes, limit %d", got, replication.MaxFileLen)
	}
}

// fixtureSeeds adds the golden files of testdata/ltx, valid and damaged.
func fixtureSeeds(f *testing.F) {
	paths, err := filepath.Glob(filepath.Join("..", "testdata", "ltx", "*.ltx"))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no seed fixtures: %v", err)
	}
	for _, p := range paths {
		body, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body)
	}
}

// FuzzDecode: Decode never panics, and whatever it accepts is canonical —
// Encode gives back the very bytes, and the file decodes at its own slot.
// Seeds: testdata/ltx and replication/testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	fixtureSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		// A key that names no slot skips the slot check, so every header
		// is reachable; the slot check is exercised below.
		file, err := replication.Decode("fuzz", body)
		if err != nil {
			if errcode.CodeOf(err) != errcode.CodeCorruptTx {
				t.Fatalf("refused with %v, want DEED-E031", err)
			}
			return
		}
		again, err := replication.Encode(file)
		if err != nil {
			t.Fatalf("a decoded file does not encode: %v", err)
		}
		if !bytes.Equal(again, body) {
			t.Fatalf("not canonical: decoded %x, re-encoded %x", body, again)
		}
		key := replication.SlotKey(cell, file.Epoch, file.TxID)
		if file.Kind == replication.KindSnapshot {
			key = replication.SnapshotKey(cell, file.Epoch, file.TxID)
		}
		if _, err := replication.Decode(key, body); err != nil {
			t.Fatalf("does not decode at its own slot %s: %v", key, err)
		}
	})
}

// FuzzEncode: every file Encode accepts decodes to the same file: Encode
// never writes what a reader refuses.
func FuzzEncode(f *testing.F) {
	f.Add(uint8(1), uint64(3), uint64(7), "tok", uint64(12), []byte("hello\x00world"), uint64(5))
	f.Add(uint8(2), uint64(3), uint64(8), "", uint64(15), []byte{}, uint64(5))
	f.Add(uint8(4), uint64(5), uint64(9), "t3", uint64(20), []byte("state"), uint64(0))
	f.Fuzz(func(t *testing.T, kind uint8, epoch, txid uint64, token string, pos uint64, data []byte, by uint64) {
		in := &replication.File{Kind: replication.Kind(kind), Epoch: epoch, TxID: replication.TxID(txid), Token: token, Pos: replication.Pos(pos), By: by}
		switch in.Kind {
		case replication.KindRecords:
			in.Records = bytes.Split(data, []byte{0}) // at least one record
		case replication.KindSnapshot:
			in.State = data
		}
		body, err := replication.Encode(in)
		if err != nil {
			return
		}
		out, err := replication.Decode("fuzz", body)
		if err != nil {
			t.Fatalf("Encode(%+v) does not decode: %v", in, err)
		}
		if out.Kind != in.Kind || out.Epoch != in.Epoch || out.TxID != in.TxID || out.Token != in.Token || out.Pos != in.Pos ||
			!bytes.Equal(out.State, in.State) || len(out.Records) != len(in.Records) {
			t.Fatalf("round trip: %+v became %+v", in, out)
		}
		for i := range in.Records {
			if !bytes.Equal(out.Records[i], in.Records[i]) {
				t.Fatalf("record %d: %q became %q", i, in.Records[i], out.Records[i])
			}
		}
		if (in.Kind == replication.KindSeal || in.Kind == replication.KindTombstone) && out.By != in.By {
			t.Fatalf("by %d became %d", in.By, out.By)
		}
	})
}
