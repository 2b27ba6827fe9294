package owner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/internal/nonce"
)

// MaxRecordLen bounds what deed reads of an ownership record (own.json) or a
// node lease. Both are small JSON objects deed writes itself (a few hundred
// bytes; a node's Addr is limited to MaxAddrLen), so anything larger is not
// a record: it is refused as DEED-E030 from its announced size, and at most
// MaxRecordLen+1 bytes of it are ever read.
const MaxRecordLen = 64 << 10

// MaxAddrLen bounds Config.Addr, so that a node lease always fits
// MaxRecordLen.
const MaxAddrLen = 4096

// getRecord reads an ownership record or node lease (what names it in the
// error), at most MaxRecordLen bytes of it. An object over the limit comes
// back with its key and ETag, no body, and a DEED-E030 error that matches
// bucket.ErrTooLarge: it is garbage deed cannot have written, which a
// forced claim or a lease takeover may still replace with If-Match.
func getRecord(ctx context.Context, b bucket.Bucket, key, what string) (bucket.Object, error) {
	obj, err := b.Get(ctx, key, MaxRecordLen)
	if errors.Is(err, bucket.ErrTooLarge) {
		return obj, errcode.Errorf(errcode.CodeCorruptOwner, "corrupt %s %s: %w", what, key, err)
	}
	return obj, err
}

// Record is the body of cells/<cell>/own.json. Node "" means released.
//
// Every write carries a fresh Nonce: S3 ETags are content hashes, so two
// writes of identical bytes would share an ETag and let a stale If-Match
// succeed (the ABA problem). The nonce is also how a claimer recognises its
// own write after an ambiguous outcome.
//
// Inc is the incarnation of the claimer's node lease. It lets a peer whose
// view of that lease already proves the incarnation dead take the cell over
// without reading the lease again (see IncarnationDead); a record without it
// (older writers, or a claim by a node that never opened) simply always
// costs that read.
type Record struct {
	Node  string `json:"node"`
	Epoch uint64 `json:"epoch"`
	Nonce string `json:"nonce"`
	AtMS  int64  `json:"at_ms"`
	Inc   string `json:"inc,omitempty"`
	// End, on a release, is where the releasing epoch's chain ended: the
	// slot and position of the seal its log's Close wrote. It is only a
	// hint for the next epoch's log, which reads that seal before it
	// trusts it (see PrevEnd).
	End *End `json:"end,omitempty"`
	// Announces is an epoch (at most Epoch) that may write to the cell's
	// log without an announcement marker: a claim that took its
	// predecessor's released end announces its own epoch here instead
	// (see replication.Open). Every later write of own.json carries it,
	// and every later claim's fencing walk counts it announced, until a
	// release that names its end (that epoch's chain is sealed, so
	// nothing of it or below can write again). 0: none; a record without
	// it (older writers) is read as 0.
	Announces uint64 `json:"announces,omitempty"`
}

// succeed sets what a claim's record r announces when it replaces a record
// of epoch prevEpoch that announces prevAnnounces and, if it is a release
// that names its chain end, end (nil otherwise). It carries prevAnnounces
// on, or announces r's own epoch when r takes that end (r.Epoch is
// prevEpoch+1: no claim came between), and reports whether it did. The
// epoch the replaced record announced is counted by r's fencing walk
// either way.
func (r *Record) succeed(prevEpoch, prevAnnounces uint64, end *End) (takesEnd bool) {
	r.Announces = prevAnnounces
	if end != nil && r.Epoch == prevEpoch+1 {
		r.Announces = r.Epoch
		return true
	}
	return false
}

// End is a slot of a cell's log (txid) and the position its first record
// would have had: where a sealed chain ended.
type End struct {
	TxID uint64 `json:"txid"`
	Pos  uint64 `json:"pos"`
}

// PrevEnd is what a lease knows of its predecessor's chain end: epoch
// Epoch released the cell with its chain sealed at End, and the lease's
// claim replaced exactly that release (If-Match), at epoch Epoch+1.
//
// Own is set when that release was this node's own and the seal at End
// was written by this process's log and known to have landed (and TS is
// the timestamp it carried): nothing but this node's memory says so, and
// seals are never deleted, so the log need not read it. Otherwise the end
// is a hint that the log reads before trusting.
//
// Read is set when the claim read that seal while its PUT was in flight
// (one round trip for both): Seal is what the slot held then (nil:
// nothing). Seals are create-only and never deleted, so a seal read before
// the claim landed is still there; anything else found is only a reason
// to walk. Without Read the log reads the slot itself.
type PrevEnd struct {
	Epoch uint64
	End   End
	Own   bool
	TS    int64
	Read  bool
	Seal  []byte
}

// maxSealRead bounds the read of a seal sent with a claim: a seal is a few
// hundred bytes; anything larger is left for the log to read.
const maxSealRead = 64 << 10

// sealKey is the key of the slot (epoch, txid) of cell's log, as the
// replication package names it (replication.SlotKey).
func sealKey(cell string, epoch, txid uint64) string {
	return fmt.Sprintf("%sltx/e%d/%016x.ltx", CellPrefix(cell), epoch, txid)
}

// readSealAhead sends the read of the seal prev names, to run while the
// claim's PUT is in flight. wait, called when the PUT has answered, waits
// for the read at most as long again as the PUT took (at least 10 ms),
// then cuts it off: a read that hangs or fails leaves prev.Read unset, and
// the log reads the slot itself (with its retries), so a slow read costs
// a request, never a stuck claim. Nothing is read for the node's own seal.
func (n *Node) readSealAhead(ctx context.Context, cell string, prev *PrevEnd) (wait func()) {
	if prev == nil || prev.Own || prev.End.TxID == 0 {
		return func() {}
	}
	start := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var read bool
	var seal []byte
	key := sealKey(cell, prev.Epoch, prev.End.TxID)
	go func() {
		defer close(done)
		obj, err := n.b.Get(rctx, key, maxSealRead)
		switch {
		case err == nil:
			read, seal = true, obj.Body
		case errors.Is(err, bucket.ErrNotFound):
			read = true
		}
	}()
	return func() {
		grace := time.NewTimer(max(time.Since(start), 10*time.Millisecond))
		defer grace.Stop()
		select {
		case <-done:
		case <-grace.C:
		}
		cancel()
		<-done
		prev.Read, prev.Seal = read, seal // read: a body, or a definite 404
	}
}

// Released reports whether the record names no owner.
func (r Record) Released() bool { return r.Node == "" }

// ParseRecord decodes an ownership record. Anything that is not a
// well-formed record is DEED-E030: deed never overwrites what it cannot
// read, unless an operator forces it.
func ParseRecord(key string, body []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(body, &r); err != nil {
		return Record{}, errcode.Errorf(errcode.CodeCorruptOwner, "corrupt ownership record %s: %w", key, err)
	}
	if r.Epoch == 0 || r.Nonce == "" {
		return Record{}, errcode.Errorf(errcode.CodeCorruptOwner, "corrupt ownership record %s: missing epoch or nonce", key)
	}
	if r.Announces > r.Epoch {
		return Record{}, errcode.Errorf(errcode.CodeCorruptOwner, "corrupt ownership record %s: announces epoch %d above its epoch %d", key, r.Announces, r.Epoch)
	}
	if r.Node != "" {
		if err := ValidateName("node", r.Node); err != nil {
			return Record{}, errcode.Errorf(errcode.CodeCorruptOwner, "corrupt ownership record %s: %v", key, err)
		}
	}
	return r, nil
}

func (r Record) marshal() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("marshal ownership record: %v", err)) // plain struct: cannot fail
	}
	return b
}

// NodeRecord is the body of nodes/<node>.json, the node lease.
type NodeRecord struct {
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
	Addr        string `json:"addr"`
	TTLMS       int64  `json:"ttl_ms"`
	Seq         uint64 `json:"seq"`
	AtMS        int64  `json:"at_ms"`
	Released    bool   `json:"released,omitempty"`
	// Weight is the node's share of placement (rendezvous hashing): a node
	// of weight 2 is preferred for about twice the cells of one of weight
	// 1. Absent or 0 means 1.
	Weight float64 `json:"weight,omitempty"`
	// Draining says the node hands its cells off and takes no new ones:
	// peers leave it out of placement.
	Draining bool `json:"draining,omitempty"`
	// Cells is how many cells the node held when it wrote this version;
	// it is for people and placement views, never for liveness.
	Cells int `json:"cells"`
	// Pad makes the lease's size tell its advertised fields apart (see
	// padded): a renewal that changes none of them keeps the size a LIST
	// shows, so a peer need not read it.
	Pad string `json:"pad,omitempty"`
	// MAC authenticates the lease: HMAC-SHA256 under LeaseKey of the
	// fleet secret over the record's JSON encoding without this field
	// (see leaseMAC). Absent on a node without a fleet secret.
	MAC string `json:"mac,omitempty"`
}

// MaxWeight bounds a node's placement weight.
const MaxWeight = 1000

// parseNodeRecord decodes the node lease of node read from key. A body that
// is not JSON, names another node, has no incarnation, or advertises a TTL
// outside MinTTL..MaxTTL is DEED-E030: no deed node writes one, and its
// fields (above all ttl_ms, which makes peers wait) must not be believed.
func parseNodeRecord(key, node string, body []byte) (NodeRecord, error) {
	corrupt := func(format string, args ...any) error {
		return errcode.Errorf(errcode.CodeCorruptOwner, "corrupt node lease %s: %s", key, fmt.Sprintf(format, args...))
	}
	var r NodeRecord
	if err := json.Unmarshal(body, &r); err != nil {
		return NodeRecord{}, corrupt("%v", err)
	}
	switch {
	case r.Node != node:
		return NodeRecord{}, corrupt("names node %q", r.Node)
	case r.Incarnation == "":
		return NodeRecord{}, corrupt("no incarnation")
	case r.TTLMS < MinTTL.Milliseconds() || r.TTLMS > MaxTTL.Milliseconds():
		return NodeRecord{}, corrupt("ttl_ms %d outside %v..%v", r.TTLMS, MinTTL, MaxTTL)
	case r.Weight < 0 || r.Weight > MaxWeight:
		return NodeRecord{}, corrupt("weight %v outside 0..%d", r.Weight, MaxWeight)
	case r.Cells < 0:
		return NodeRecord{}, corrupt("cells %d is negative", r.Cells)
	}
	return r, nil
}

// EffectiveWeight is the placement weight: Weight, or 1 when it is absent.
func (r NodeRecord) EffectiveWeight() float64 {
	if r.Weight == 0 {
		return 1
	}
	return r.Weight
}

// TTL is the TTL the lease advertises; parseNodeRecord has checked its range.
func (r NodeRecord) TTL() time.Duration { return time.Duration(r.TTLMS) * time.Millisecond }

func (r NodeRecord) marshal() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("marshal node lease: %v", err))
	}
	return b
}

// newNonce returns 16 random bytes in hex.
func newNonce() string {
	return nonce.Hex(16)
}
