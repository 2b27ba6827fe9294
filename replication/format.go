package replication

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/deedkit/deed/errcode"
)

// TxID is a slot number in a cell's log. It is global to the cell and never
// reused: epoch N+1 continues where epoch N's chain ended. The first slot is 1.
type TxID uint64

// Pos is the position of one record in the cell's whole log: the first
// record ever appended is 1, the next 2, and so on across epochs, group
// commits and restores. Pos 0 means "before the first record".
type Pos uint64

// Kind says what a file holds.
type Kind uint8

// The kinds of file. Records, seals and tombstones live in .ltx slots;
// snapshots in .snapshot files.
const (
	KindRecords   Kind = 1 // a batch of records (one group commit)
	KindSeal      Kind = 2 // the end of an epoch that has data
	KindTombstone Kind = 3 // the end of an epoch that never wrote at this slot
	KindSnapshot  Kind = 4 // application state covering every txid ≤ this one
)

func (k Kind) String() string {
	switch k {
	case KindRecords:
		return "records"
	case KindSeal:
		return "seal"
	case KindTombstone:
		return "tombstone"
	case KindSnapshot:
		return "snapshot"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// fences reports whether a file of this kind ends the chain of its epoch.
func (k Kind) fences() bool { return k == KindSeal || k == KindTombstone }

// Format constants. The layout is documented in doc.go; changing it needs a
// new version, never an edit.
const (
	fileMagic   = "DLTX"
	fileVersion = 1
	// fileVersion2 adds a timestamp to records, seals and tombstones, and
	// idempotency keys to records (see Encode). A file with neither is
	// still written as version 1, so every version-1 file keeps decoding
	// and encoding back to its own bytes.
	fileVersion2 = 2
	// MaxKeyLen bounds an idempotency key (ValidateKey).
	MaxKeyLen  = 255
	headerLen  = 40
	trailerLen = 4 // CRC-32C
	// MaxTokenLen bounds the writer incarnation stored in every file.
	MaxTokenLen = 1024
	// maxMarkerLen is the largest a seal or tombstone can be; GC reads
	// every .ltx file at most this big to tell records from markers.
	maxMarkerLen = headerLen + MaxTokenLen + 8 + trailerLen
	// MaxFileLen bounds a transaction (.ltx) or snapshot file, framing
	// included. Encode refuses to build a larger one (DEED-E040), and a read
	// refuses a larger object as DEED-E031 from the size the store
	// announces, holding at most MaxFileLen+1 bytes of it: one request's
	// memory is bounded whatever sits in a slot. 16 MiB is four default
	// group commits (DefaultMaxBatchBytes) and sixteen of the daemon's
	// largest records; a snapshot's state must fit it too.
	MaxFileLen = 16 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// File is one decoded transaction (.ltx) or snapshot file.
type File struct {
	Kind Kind
	// Epoch and TxID name the slot the file sits in (its key). For a seal or
	// tombstone the epoch is the fenced one, not the writer's (see By).
	Epoch uint64
	TxID  TxID
	// Token is the incarnation of the writer: the claim nonce of its lease.
	Token string
	// Pos is, for records, the position of the first record in the file;
	// for a snapshot, the position of the first record after it; for a seal
	// or tombstone, the position the chain continued at when it was written
	// (diagnosis only).
	Pos Pos
	// Records holds the batch of a KindRecords file (at least one).
	Records [][]byte
	// By is the epoch that wrote a seal or tombstone. Diagnosis only: the
	// restore rule never follows it.
	By uint64
	// State is a snapshot's application state.
	State []byte
	// TS is the owner's timestamp of a records file (every record in it
	// carries it) and, in a seal or tombstone, the newest timestamp the
	// writer had fenced: milliseconds since the Unix epoch, never
	// decreasing along a cell's chain. 0 in files written before
	// timestamps existed.
	TS int64
	// Keys are the idempotency keys of a records file, in record order:
	// each names the run of records one keyed append (or batch) put here.
	Keys []TxKey
}

// TxKey says that records First .. First+Count-1 of a records file (0-based,
// within the file) were appended under idempotency key Key.
type TxKey struct {
	Key          string
	First, Count int
}

// ValidateKey checks an idempotency key: 1 to MaxKeyLen bytes of printable
// ASCII (0x20-0x7e), not starting or ending with a space (an HTTP header
// would lose it). Anything else is DEED-E040.
func ValidateKey(k string) error {
	if len(k) == 0 || len(k) > MaxKeyLen {
		return errcode.Errorf(errcode.CodeBadRequest, "idempotency key of %d bytes: want 1..%d", len(k), MaxKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return errcode.Errorf(errcode.CodeBadRequest, "idempotency key: byte %d (0x%02x) is not printable ASCII", i, k[i])
		}
	}
	if k[0] == ' ' || k[len(k)-1] == ' ' {
		return errcode.Errorf(errcode.CodeBadRequest, "idempotency key starts or ends with a space")
	}
	return nil
}

// checkKeys verifies that keys describe disjoint, ordered runs of a file of
// count records, each under a distinct valid key.
func checkKeys(keys []TxKey, count int) error {
	next := 0
	seen := make(map[string]bool, len(keys))
	for i, k := range keys {
		if err := ValidateKey(k.Key); err != nil {
			return fmt.Errorf("key %d: %w", i+1, err)
		}
		if k.First < next || k.Count < 1 || k.First > count || k.Count > count-k.First {
			return fmt.Errorf("key %d covers records %d+%d of %d, after %d", i+1, k.First, k.Count, count, next)
		}
		if seen[k.Key] {
			return fmt.Errorf("key %d repeats %q", i+1, k.Key)
		}
		seen[k.Key] = true
		next = k.First + k.Count
	}
	return nil
}

// version is the format version f is written in: 2 only when it carries
// what version 1 cannot.
func (f *File) version() byte {
	if f.TS != 0 || len(f.Keys) > 0 {
		return fileVersion2
	}
	return fileVersion
}

// Count is the number of records in the file.
func (f *File) Count() int { return len(f.Records) }

// NextPos is the position after the file's last record.
func (f *File) NextPos() Pos { return f.Pos + Pos(len(f.Records)) }

// Encode frames f:
//
//	offset size
//	 0      4   magic "DLTX"
//	 4      1   version (1)
//	 5      1   kind
//	 6      2   token length
//	 8      8   epoch
//	16      8   txid
//	24      8   pos
//	32      4   record count
//	36      4   payload length
//	40      -   token, then payload
//	end-4   4   CRC-32C (Castagnoli) of everything before it
//
// All integers are big-endian. The payload is count × (uvarint length,
// bytes) for records, the sealing epoch (8 bytes) for seals and tombstones,
// and the raw state for snapshots.
//
// Version 2 (written only when the file has a timestamp or keys; snapshots
// are always version 1) prefixes a records payload with the timestamp (8
// bytes, signed) and the keys — uvarint count, then per key uvarint length,
// key, uvarint first record, uvarint record count — and appends the
// timestamp (8 bytes) to a seal's or tombstone's.
func Encode(f *File) ([]byte, error) {
	if len(f.Token) > MaxTokenLen {
		return nil, errcode.Errorf(errcode.CodeBadRequest, "encode %s file: token of %d bytes, limit %d", f.Kind, len(f.Token), MaxTokenLen)
	}
	if f.TxID == math.MaxUint64 {
		return nil, errcode.Errorf(errcode.CodeBadRequest, "encode %s file: txid %d has no successor", f.Kind, uint64(f.TxID))
	}
	var payload []byte
	count := 0
	switch f.Kind {
	case KindRecords:
		if len(f.Records) == 0 {
			return nil, fmt.Errorf("encode records file: empty batch")
		}
		if f.Pos == 0 || uint64(len(f.Records)) > math.MaxUint64-uint64(f.Pos) {
			return nil, errcode.Errorf(errcode.CodeBadRequest, "encode records file: %d records from position %d", len(f.Records), uint64(f.Pos))
		}
		if err := checkKeys(f.Keys, len(f.Records)); err != nil {
			return nil, errcode.Errorf(errcode.CodeBadRequest, "encode records file: %v", err)
		}
		n := 0
		for _, r := range f.Records {
			n += binary.MaxVarintLen64 + len(r)
		}
		for _, k := range f.Keys {
			n += 3*binary.MaxVarintLen64 + len(k.Key)
		}
		payload = make([]byte, 0, n+8+binary.MaxVarintLen64)
		if f.version() == fileVersion2 {
			payload = binary.BigEndian.AppendUint64(payload, uint64(f.TS))
			payload = binary.AppendUvarint(payload, uint64(len(f.Keys)))
			for _, k := range f.Keys {
				payload = binary.AppendUvarint(payload, uint64(len(k.Key)))
				payload = append(payload, k.Key...)
				payload = binary.AppendUvarint(payload, uint64(k.First))
				payload = binary.AppendUvarint(payload, uint64(k.Count))
			}
		}
		for _, r := range f.Records {
			payload = binary.AppendUvarint(payload, uint64(len(r)))
			payload = append(payload, r...)
		}
		count = len(f.Records)
	case KindSeal, KindTombstone:
		if len(f.Keys) > 0 {
			return nil, fmt.Errorf("encode %s: keys belong to records", f.Kind)
		}
		payload = binary.BigEndian.AppendUint64(nil, f.By)
		if f.TS != 0 {
			payload = binary.BigEndian.AppendUint64(payload, uint64(f.TS))
		}
	case KindSnapshot:
		if f.version() != fileVersion {
			return nil, fmt.Errorf("encode snapshot: snapshots carry no timestamp or keys")
		}
		payload = f.State
	default:
		return nil, fmt.Errorf("encode file: unknown kind %d", f.Kind)
	}
	if size := headerLen + len(f.Token) + len(payload) + trailerLen; size > MaxFileLen {
		return nil, errcode.Errorf(errcode.CodeBadRequest, "encode %s file: %d bytes, limit %d (MaxFileLen)", f.Kind, size, MaxFileLen)
	}
	b := make([]byte, headerLen, headerLen+len(f.Token)+len(payload)+trailerLen)
	copy(b, fileMagic)
	b[4] = f.version()
	b[5] = byte(f.Kind)
	binary.BigEndian.PutUint16(b[6:], uint16(len(f.Token)))
	binary.BigEndian.PutUint64(b[8:], f.Epoch)
	binary.BigEndian.PutUint64(b[16:], uint64(f.TxID))
	binary.BigEndian.PutUint64(b[24:], uint64(f.Pos))
	binary.BigEndian.PutUint32(b[32:], uint32(count))
	binary.BigEndian.PutUint32(b[36:], uint32(len(payload)))
	b = append(b, f.Token...)
	b = append(b, payload...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// Decode parses and verifies a file read from key. Any damage — a short or
// over-long body, a bad magic, version or kind, a checksum mismatch, a
// header that names another slot than the key — is DEED-E031 naming the key.
//
// Decode accepts only what Encode produces: a file that decodes encodes
// back to the same bytes. So it also refuses what Encode never writes — a
// file over MaxFileLen, a token over MaxTokenLen, a record length in a
// longer varint than needed, a slot number or positions that would wrap
// around (the next slot or position after the file must exist).
func Decode(key string, body []byte) (*File, error) {
	corrupt := func(format string, args ...any) error {
		return errcode.Errorf(errcode.CodeCorruptTx, "corrupt transaction file %s: %s", key, fmt.Sprintf(format, args...))
	}
	if len(body) > MaxFileLen {
		return nil, corrupt("%d bytes, limit %d", len(body), MaxFileLen)
	}
	if len(body) < headerLen+trailerLen {
		return nil, corrupt("truncated: %d bytes, header needs %d", len(body), headerLen+trailerLen)
	}
	if string(body[:4]) != fileMagic {
		return nil, corrupt("bad magic %q", body[:4])
	}
	tokenLen := int(binary.BigEndian.Uint16(body[6:]))
	payloadLen := int(binary.BigEndian.Uint32(body[36:]))
	if tokenLen > MaxTokenLen {
		return nil, corrupt("token of %d bytes, limit %d", tokenLen, MaxTokenLen)
	}
	if want := headerLen + tokenLen + payloadLen + trailerLen; len(body) != want {
		if len(body) < want {
			return nil, corrupt("truncated: %d bytes, header says %d", len(body), want)
		}
		return nil, corrupt("%d bytes, header says %d", len(body), want)
	}
	end := len(body) - trailerLen
	if got, want := crc32.Checksum(body[:end], castagnoli), binary.BigEndian.Uint32(body[end:]); got != want {
		return nil, corrupt("checksum mismatch (crc32c %08x, stored %08x)", got, want)
	}
	version := body[4]
	if version != fileVersion && version != fileVersion2 {
		return nil, corrupt("unsupported version %d", version)
	}
	f := &File{
		Kind:  Kind(body[5]),
		Epoch: binary.BigEndian.Uint64(body[8:]),
		TxID:  TxID(binary.BigEndian.Uint64(body[16:])),
		Pos:   Pos(binary.BigEndian.Uint64(body[24:])),
		Token: string(body[headerLen : headerLen+tokenLen]),
	}
	if f.TxID == math.MaxUint64 {
		return nil, corrupt("txid %d has no successor", uint64(f.TxID))
	}
	count := int(binary.BigEndian.Uint32(body[32:]))
	payload := body[headerLen+tokenLen : end]
	switch f.Kind {
	case KindRecords:
		if count == 0 {
			return nil, corrupt("records file with no records")
		}
		p := payload
		if version == fileVersion2 {
			var err error
			if p, err = decodeKeys(f, p, count); err != nil {
				return nil, corrupt("%v", err)
			}
		}
		f.Records = make([][]byte, 0, min(count, len(payload)+1))
		for i := 0; i < count; i++ {
			n, k := binary.Uvarint(p)
			if k <= 0 || n > uint64(len(p)-k) {
				return nil, corrupt("record %d of %d overruns the payload", i+1, count)
			}
			if k != uvarintLen(n) {
				return nil, corrupt("record %d of %d: length %d in a %d-byte varint (not minimal)", i+1, count, n, k)
			}
			f.Records = append(f.Records, p[k:k+int(n):k+int(n)])
			p = p[k+int(n):]
		}
		if len(p) != 0 {
			return nil, corrupt("%d bytes after the last record", len(p))
		}
		if f.Pos == 0 {
			return nil, corrupt("records file without a position")
		}
		if uint64(count) > math.MaxUint64-uint64(f.Pos) {
			return nil, corrupt("%d records from position %d overflow", count, uint64(f.Pos))
		}
	case KindSeal, KindTombstone:
		want := 8
		if version == fileVersion2 {
			want = 16
		}
		if count != 0 || len(payload) != want {
			return nil, corrupt("%s with %d records and a %d-byte payload", f.Kind, count, len(payload))
		}
		f.By = binary.BigEndian.Uint64(payload)
		if version == fileVersion2 {
			if f.TS = int64(binary.BigEndian.Uint64(payload[8:])); f.TS == 0 {
				return nil, corrupt("version 2 %s without a timestamp", f.Kind)
			}
		}
	case KindSnapshot:
		if count != 0 {
			return nil, corrupt("snapshot with %d records", count)
		}
		if version != fileVersion {
			return nil, corrupt("snapshot in version %d", version)
		}
		f.State = payload
	default:
		return nil, corrupt("unknown kind %d", f.Kind)
	}
	if k, ok := parseKey(key); ok {
		if k.epoch != f.Epoch || k.txid != f.TxID {
			return nil, corrupt("header names e%d/%016x", f.Epoch, uint64(f.TxID))
		}
		if k.snapshot != (f.Kind == KindSnapshot) {
			return nil, corrupt("a %s in a %s key", f.Kind, map[bool]string{true: ".snapshot", false: ".ltx"}[k.snapshot])
		}
	}
	return f, nil
}

// decodeKeys reads a version-2 records payload's timestamp and keys into f
// and returns the rest of the payload (the records).
func decodeKeys(f *File, p []byte, count int) ([]byte, error) {
	if len(p) < 8 {
		return nil, fmt.Errorf("version 2 records without a timestamp")
	}
	f.TS = int64(binary.BigEndian.Uint64(p))
	p = p[8:]
	uv := func(what string) (uint64, error) {
		n, k := binary.Uvarint(p)
		if k <= 0 || k != uvarintLen(n) {
			return 0, fmt.Errorf("bad or non-minimal varint for %s", what)
		}
		p = p[k:]
		return n, nil
	}
	nk, err := uv("the key count")
	if err != nil {
		return nil, err
	}
	if nk > uint64(count) {
		return nil, fmt.Errorf("%d keys for %d records", nk, count)
	}
	if nk > 0 {
		f.Keys = make([]TxKey, 0, nk)
	}
	for i := uint64(0); i < nk; i++ {
		n, err := uv("a key length")
		if err != nil {
			return nil, err
		}
		if n > uint64(len(p)) || n > MaxKeyLen {
			return nil, fmt.Errorf("key %d of %d bytes overruns the payload", i+1, n)
		}
		k := string(p[:n])
		p = p[n:]
		first, err := uv("a key's first record")
		if err != nil {
			return nil, err
		}
		cnt, err := uv("a key's record count")
		if err != nil {
			return nil, err
		}
		if first > uint64(count) || cnt > uint64(count) {
			return nil, fmt.Errorf("key %d covers records %d+%d of %d", i+1, first, cnt, count)
		}
		f.Keys = append(f.Keys, TxKey{Key: k, First: int(first), Count: int(cnt)})
	}
	if err := checkKeys(f.Keys, count); err != nil {
		return nil, err
	}
	if f.TS == 0 && len(f.Keys) == 0 {
		return nil, fmt.Errorf("version 2 records with neither a timestamp nor keys")
	}
	return p, nil
}

// uvarintLen is the length of the minimal (binary.AppendUvarint) encoding of n.
func uvarintLen(n uint64) int {
	k := 1
	for ; n >= 0x80; n >>= 7 {
		k++
	}
	return k
}
