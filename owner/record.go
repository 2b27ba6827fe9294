package owner

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/deedkit/deed/bucket"
)

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
}

// Released reports whether the record names no owner.
func (r Record) Released() bool { return r.Node == "" }

// ParseRecord decodes an ownership record. Anything that is not a
// well-formed record is DEED-E030: deed never overwrites what it cannot
// read, unless an operator forces it.
func ParseRecord(key string, body []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(body, &r); err != nil {
		return Record{}, bucket.Errorf(bucket.CodeCorruptOwner, "corrupt ownership record %s: %w", key, err)
	}
	if r.Epoch == 0 || r.Nonce == "" {
		return Record{}, bucket.Errorf(bucket.CodeCorruptOwner, "corrupt ownership record %s: missing epoch or nonce", key)
	}
	if r.Node != "" {
		if err := ValidateName("node", r.Node); err != nil {
			return Record{}, bucket.Errorf(bucket.CodeCorruptOwner, "corrupt ownership record %s: %v", key, err)
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
}

func parseNodeRecord(key string, body []byte) (NodeRecord, error) {
	var r NodeRecord
	if err := json.Unmarshal(body, &r); err != nil {
		return NodeRecord{}, bucket.Errorf(bucket.CodeCorruptOwner, "corrupt node lease %s: %w", key, err)
	}
	return r, nil
}

func (r NodeRecord) marshal() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("marshal node lease: %v", err))
	}
	return b
}

// newNonce returns 16 random bytes in hex.
func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
