package replication

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/deedkit/deed/owner"
)

// LogPrefix is the prefix of every transaction and snapshot file of cell.
func LogPrefix(cell string) string { return owner.CellPrefix(cell) + "ltx/" }

// EpochPrefix is the prefix of epoch's files.
func EpochPrefix(cell string, epoch uint64) string {
	return LogPrefix(cell) + "e" + strconv.FormatUint(epoch, 10) + "/"
}

// SlotKey is the key of slot txid in epoch: cells/<cell>/ltx/e<epoch>/<txid:016x>.ltx.
func SlotKey(cell string, epoch uint64, txid TxID) string {
	return fmt.Sprintf("%s%016x.ltx", EpochPrefix(cell, epoch), uint64(txid))
}

// SnapshotKey is the key of a snapshot covering txid, written in epoch.
func SnapshotKey(cell string, epoch uint64, txid TxID) string {
	return fmt.Sprintf("%s%016x.snapshot", EpochPrefix(cell, epoch), uint64(txid))
}

// AnnounceKey is the announcement marker of epoch: the owner of epoch
// creates it (create-only) after its claim and before it reads or writes
// anything else of the log, so that every claimer whose LIST comes later
// fences epoch too. The epoch is zero-padded to 20 digits, so announcement
// keys sort by epoch and a LIST can start after a given one.
func AnnounceKey(cell string, epoch uint64) string {
	return fmt.Sprintf("%s%s%020d", LogPrefix(cell), announceDir, epoch)
}

// announceDir holds the announcement markers, beside the e<N>/ prefixes.
const announceDir = "announce/"

// fileKey is a parsed transaction or snapshot key.
type fileKey struct {
	epoch    uint64
	txid     TxID
	snapshot bool
}

// parseKey parses ".../ltx/e<epoch>/<txid:016x>.(ltx|snapshot)" in the
// canonical form deed writes and nothing else: the epoch in decimal
// without leading zeros, the txid in 16 lower-case hex digits, both ≥ 1.
// Anything else (upper-case hex, other padding, other names, a key without
// the ltx/ component) is not ok: it is a stranger that no walk reads.
func parseKey(key string) (fileKey, bool) {
	i := strings.LastIndex(key, "/ltx/e")
	if i < 0 {
		return fileKey{}, false
	}
	return parseLogName(key[i+len("/ltx/"):])
}

// parseLogName parses a key relative to the log prefix:
// "e<epoch>/<txid:016x>.(ltx|snapshot)", canonical form only.
func parseLogName(rest string) (fileKey, bool) {
	if !strings.HasPrefix(rest, "e") {
		return fileKey{}, false
	}
	rest = rest[1:]
	j := strings.IndexByte(rest, '/')
	if j <= 0 {
		return fileKey{}, false
	}
	epoch, ok := canonicalEpoch(rest[:j])
	if !ok {
		return fileKey{}, false
	}
	name := rest[j+1:]
	var k fileKey
	k.epoch = epoch
	switch {
	case strings.HasSuffix(name, ".ltx"):
		name = strings.TrimSuffix(name, ".ltx")
	case strings.HasSuffix(name, ".snapshot"):
		name = strings.TrimSuffix(name, ".snapshot")
		k.snapshot = true
	default:
		return fileKey{}, false
	}
	if len(name) != 16 {
		return fileKey{}, false
	}
	txid, err := strconv.ParseUint(name, 16, 64)
	if err != nil || txid == 0 || fmt.Sprintf("%016x", txid) != name {
		return fileKey{}, false
	}
	k.txid = TxID(txid)
	return k, true
}

// canonicalEpoch parses an epoch written in decimal as deed writes it: no
// sign, no leading zeros, at least 1.
func canonicalEpoch(s string) (uint64, bool) {
	e, err := strconv.ParseUint(s, 10, 64)
	if err != nil || e == 0 || strconv.FormatUint(e, 10) != s {
		return 0, false
	}
	return e, true
}

// parseAnnounce parses an announcement marker's name relative to the log
// prefix: "announce/<epoch:020d>", epoch ≥ 1.
func parseAnnounce(rest string) (uint64, bool) {
	name, ok := strings.CutPrefix(rest, announceDir)
	if !ok || len(name) != 20 {
		return 0, false
	}
	e, err := strconv.ParseUint(name, 10, 64)
	if err != nil || e == 0 || fmt.Sprintf("%020d", e) != name {
		return 0, false
	}
	return e, true
}

func (k fileKey) key(cell string) string {
	if k.snapshot {
		return SnapshotKey(cell, k.epoch, k.txid)
	}
	return SlotKey(cell, k.epoch, k.txid)
}
