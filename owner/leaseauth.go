package owner

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// Node leases are authenticated with a key derived from the fleet secret,
// so that membership cannot be had by anyone who can merely write the
// bucket (every host that runs `deed claim` or `deed exec` must). The MAC
// covers the whole lease as deed encodes it, so none of its fields (address,
// weight, draining, incarnation, TTL) can be changed or made up without the
// secret. A lease is only ever judged for takeover by its ETag, which
// nobody can forge usefully; what the MAC decides is whether its node is a
// member: sent requests and cells, counted in placement.

// leaseKeyLabel separates the lease key from every other key derived from
// the same secret (the peer-request key among them).
const leaseKeyLabel = "deed node lease v1"

// LeaseKey derives the node-lease key from a fleet secret:
// HMAC-SHA256(secret, "deed node lease v1"). The secret itself never keys
// anything directly, so a key that leaks reveals neither it nor the others.
func LeaseKey(secret string) []byte {
	if secret == "" {
		return nil
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(leaseKeyLabel))
	return m.Sum(nil)
}

// leaseMAC is the MAC of r as deed encodes it without its MAC field: the
// canonical bytes are the JSON encoding of the record's fields, in the
// struct's order, which every deed version that writes "mac" produces alike.
func leaseMAC(key []byte, r NodeRecord) string {
	r.MAC = ""
	m := hmac.New(sha256.New, key)
	m.Write(r.marshal())
	return hex.EncodeToString(m.Sum(nil))
}

// sign returns r with its MAC set (r unchanged when key is nil: a node
// without a fleet secret writes unauthenticated leases).
func (r NodeRecord) sign(key []byte) NodeRecord {
	r.MAC = ""
	if key != nil {
		r.MAC = leaseMAC(key, r)
	}
	return r
}

// verified reports whether r's MAC is right under key. Fields the struct
// does not know are not covered, and not believed either: nothing reads
// them.
func (r NodeRecord) verified(key []byte) bool {
	if key == nil || r.MAC == "" {
		return false
	}
	got, err := hex.DecodeString(r.MAC)
	if err != nil {
		return false
	}
	want, _ := hex.DecodeString(leaseMAC(key, r))
	return hmac.Equal(got, want)
}
