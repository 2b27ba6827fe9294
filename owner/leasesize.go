package owner

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// A LIST of nodes/ returns each lease's ETag and size, no body. Every
// renewal changes the ETag (the seq, the timestamp and the MAC change), so
// the ETag tells a peer the node is renewing: that is all liveness needs.
// What a peer needs the body for are the advertised fields (incarnation,
// address, TTL, weight, draining, released), which change rarely. The
// writer pads its lease so that its size modulo leaseGenMod is a hash of
// exactly those fields: a renewal that changes none of them keeps it, and
// an observer reads (GETs) a lease only when it changes — a new version of
// the same size class is taken from the LIST alone.
//
// A change the hash misses (1 in 256) only delays what the change tells:
// a new incarnation or address is learned at the next change or the next
// read a claim makes; a release is then judged as a death, TTL+margin
// later. Liveness never depends on it: it is the ETag's.

// leaseGenMod is the number of size classes.
const leaseGenMod = 256

// leaseGen is the size class of r's advertised fields.
func leaseGen(r NodeRecord) int {
	h := fnv.New32a()
	for _, f := range []string{r.Node, r.Incarnation, r.Addr, strconv.FormatInt(r.TTLMS, 10),
		strconv.FormatFloat(r.Weight, 'g', -1, 64), strconv.FormatBool(r.Draining), strconv.FormatBool(r.Released)} {
		h.Write([]byte(f))
		h.Write([]byte{0})
	}
	return int(h.Sum32() % leaseGenMod)
}

// padded returns r with Pad set so that the lease deed writes for it
// (signed with key, or not when key is nil) is leaseGen(r) bytes long
// modulo leaseGenMod.
func (r NodeRecord) padded(key []byte) NodeRecord {
	r.Pad, r.MAC = "", ""
	if key != nil {
		r.MAC = strings.Repeat("0", 64) // a MAC's length: hex of SHA-256
	}
	// With a non-empty Pad the encoding grows by `,"pad":""` plus the pad.
	base := len(r.marshal()) + len(`,"pad":""`)
	pad := ((leaseGen(r)-base)%leaseGenMod + leaseGenMod) % leaseGenMod
	if pad == 0 {
		pad = leaseGenMod // never empty: omitempty would drop the field
	}
	r.Pad, r.MAC = strings.Repeat("-", pad), ""
	return r
}
