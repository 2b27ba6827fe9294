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

// fileKey is a parsed transaction or snapshot key.
type fileKey struct {
	epoch    uint64
	txid     TxID
	snapshot bool
}

// parseKey parses ".../ltx/e<epoch>/<txid:016x>.(ltx|snapshot)"; anything
// else (including a key without the ltx/ component) is not ok.
func parseKey(key string) (fileKey, bool) {
	i := strings.LastIndex(key, "/ltx/e")
	if i < 0 {
		return fileKey{}, false
	}
	rest := key[i+len("/ltx/e"):]
	j := strings.IndexByte(rest, '/')
	if j <= 0 {
		return fileKey{}, false
	}
	epoch, err := strconv.ParseUint(rest[:j], 10, 64)
	if err != nil || strconv.FormatUint(epoch, 10) != rest[:j] {
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
	if err != nil {
		return fileKey{}, false
	}
	k.txid = TxID(txid)
	return k, true
}

func (k fileKey) key(cell string) string {
	if k.snapshot {
		return SnapshotKey(cell, k.epoch, k.txid)
	}
	return SlotKey(cell, k.epoch, k.txid)
}
