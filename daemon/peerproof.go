package daemon

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/internal/nonce"
	"github.com/deedkit/deed/owner"
)

// Peer proofs: a request between the daemons of a fleet carries, instead of
// the fleet secret, a proof that its sender holds it, bound to this one
// request: an HMAC, under a key derived from the secret, of the method, the
// path and query, the body's SHA-256, the headers that steer it, the target
// and the sending node, a timestamp and a nonce. The secret never crosses
// the wire, and a captured request is good for nothing but itself, once:
//
//   - another path, query, body, method or target node changes the MAC;
//   - a replay within the window is caught by the nonce cache (a nonce is
//     accepted once);
//   - after the window, the timestamp is refused.
//
// The window is ±peerWindow of the receiver's wall clock. It has to cover
// the clock difference between two hosts of a fleet (NTP keeps them within
// milliseconds; a VM resumed from a pause may be seconds off until it
// steps its clock) plus the time a request takes from being signed to its
// body having arrived whole (a dial, peerDialTimeout, and a body read,
// bounded by apiBodyTimeout). It bounds only the nonce cache's memory, not
// safety: inside it a replay is refused by its nonce. A peer whose clock
// is off by more is refused (DEED-E041, nothing applied) with a message
// that names the skew.
//
// The answer is proved too (headerPeerAnswer): an HMAC of the request's
// nonce, the status, the serving node and the body's SHA-256. A forwarder
// relays an answer only when it verifies; one that does not (a squatter on
// a dead member's port, anything between the nodes) is not believed, and a
// forwarded append whose answer is not believed is answered applied
// "unknown" (DEED-E012), as it may have been applied.
//
// A proof opens only what peers need: the forwarded append, batch,
// snapshot and read (records, tail), the handoff and the release hint
// (peerEndpoint).
// Everything else (claim, release, move, drain, status, metrics) needs the
// client's bearer token.

const (
	// headerPeerProof carries a peer request's proof:
	// "v1 from=NODE to=NODE ts=UNIXMS nonce=HEX mac=HEX".
	headerPeerProof = "Deed-Peer-Proof"
	// headerPeerAnswer carries the proof of a peer's answer: the hex MAC.
	headerPeerAnswer = "Deed-Peer-Answer"
	// peerWindow bounds how far a proof's timestamp may be from the
	// receiver's clock; see above.
	peerWindow = 30 * time.Second
	// maxPeerNonces bounds the replay cache: about 17,000 peer requests a
	// second received by one node, each remembered for up to two windows.
	// Beyond it, peer requests are refused (DEED-E011, retry) until old
	// nonces expire, rather than remembered too briefly.
	maxPeerNonces = 1 << 20
	peerKeyLabel  = "deed peer request v1"
)

// derivePeerKey derives the key of peer proofs from the fleet secret (nil
// without one), apart from the lease key (owner.LeaseKey).
func derivePeerKey(secret string) []byte {
	if secret == "" {
		return nil
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(peerKeyLabel))
	return m.Sum(nil)
}

// peerProof is a parsed Deed-Peer-Proof header.
type peerProof struct {
	from, to string
	ts       int64 // Unix milliseconds of the sender's clock
	nonce    string
	mac      []byte
}

func (p peerProof) header() string {
	return fmt.Sprintf("v1 from=%s to=%s ts=%d nonce=%s mac=%s", p.from, p.to, p.ts, p.nonce, hex.EncodeToString(p.mac))
}

func parsePeerProof(h string) (peerProof, error) {
	bad := func(why string) (peerProof, error) {
		return peerProof{}, errcode.Errorf(errcode.CodeUnauthorized, "unauthorized: malformed %s (%s)", headerPeerProof, why)
	}
	f := strings.Fields(h)
	if len(f) != 6 || f[0] != "v1" {
		return bad("want v1 and five fields")
	}
	var p peerProof
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "from":
			p.from = v
		case "to":
			p.to = v
		case "ts":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return bad("ts")
			}
			p.ts = n
		case "nonce":
			if len(v) != 32 {
				return bad("nonce")
			}
			if _, err := hex.DecodeString(v); err != nil {
				return bad("nonce")
			}
			p.nonce = v
		case "mac":
			m, err := hex.DecodeString(v)
			if err != nil || len(m) != sha256.Size {
				return bad("mac")
			}
			p.mac = m
		default:
			return bad("field " + k)
		}
	}
	if owner.ValidateName("node", p.from) != nil || owner.ValidateName("node", p.to) != nil || p.nonce == "" || p.mac == nil {
		return bad("from, to, nonce or mac")
	}
	return p, nil
}

// peerSigned are the headers a proof covers besides the request line and
// body: those that steer what the receiver does.
var peerSigned = []string{headerHops, headerHandoffETag, headerHandoffEpoch, headerHandoffEnd, HeaderIdempotencyKey, "Content-Type"}

// requestMAC is the MAC of a peer request: method, path and query as sent,
// the proof's fields but the MAC, the covered headers, the body's SHA-256.
func requestMAC(key []byte, p peerProof, method, uri string, h http.Header, body []byte) []byte {
	sum := sha256.Sum256(body)
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s\n%s\n%s\n%s\n%s\n%d\n%s\n", peerKeyLabel, method, uri, p.from, p.to, p.ts, p.nonce)
	for _, k := range peerSigned {
		fmt.Fprintf(m, "%s:%q\n", k, h.Get(k))
	}
	m.Write([]byte(hex.EncodeToString(sum[:])))
	return m.Sum(nil)
}

// answerMAC is the MAC of a peer's answer to the request of nonce.
func answerMAC(key []byte, nonce string, status int, node string, body []byte) []byte {
	sum := sha256.Sum256(body)
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "deed peer answer v1\n%s\n%d\n%s\n%x", nonce, status, node, sum)
	return m.Sum(nil)
}

// requestURI is the path and query a proof covers: as sent on the wire.
func requestURI(r *http.Request) string {
	u := r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		u += "?" + r.URL.RawQuery
	}
	return u
}

// signPeerRequest sets req's proof: from self to the node to. The body is
// what req sends; the covered headers must be set already.
func signPeerRequest(key []byte, req *http.Request, self, to string, body []byte, now time.Time) peerProof {
	p := peerProof{from: self, to: to, ts: now.UnixMilli(), nonce: nonce.Hex(16)}
	p.mac = requestMAC(key, p, req.Method, requestURI(req), req.Header, body)
	req.Header.Set(headerPeerProof, p.header())
	return p
}

// SignPeerRequest proves req as a peer request from node from to node to
// under the fleet secret, as a daemon proves its own forwards and
// handoffs: the proof (header Deed-Peer-Proof) covers req's method, path
// and query, its steering headers (set them first), the body (which req
// must send) and a fresh nonce and timestamp, so it opens that one request
// on that one node, once, within the window. It is for programs that
// speak the peer endpoints themselves (a test, a tool); a daemon's peers
// never need it.
func SignPeerRequest(req *http.Request, secret, from, to string, body []byte) {
	signPeerRequest(derivePeerKey(secret), req, from, to, body, time.Now())
}

// peerEndpoint reports whether a peer proof may open r's endpoint: a
// forwarded append, batch, snapshot, trim or read of a cell (its records or its
// tail), a handoff, or a release hint.
func peerEndpoint(r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/cells/")
	if !ok {
		return false
	}
	cell, op, ok := strings.Cut(rest, "/")
	if !ok || cell == "" || strings.Contains(op, "/") {
		return false
	}
	switch op {
	case "append", "batch", "handoff", "trim", "hint":
		return r.Method == http.MethodPost
	case "records", "tail":
		return r.Method == http.MethodGet
	case "snapshot":
		return r.Method == http.MethodPut
	}
	return false
}

// peerVerifier checks the proofs of peer requests for one node.
type peerVerifier struct {
	key  []byte
	self string
	now  func() time.Time

	mu     sync.Mutex
	nonces map[string]time.Time // accepted nonce → when it may be forgotten
	pruned time.Time
}

func newPeerVerifier(secret, self string) *peerVerifier {
	return &peerVerifier{key: derivePeerKey(secret), self: self, now: time.Now, nonces: map[string]time.Time{}}
}

// precheck refuses, before the body is read, a proof that cannot be good
// whatever the body: malformed, for another node, or out of the window.
func (v *peerVerifier) precheck(h string) (peerProof, error) {
	if v.key == nil {
		return peerProof{}, errcode.Errorf(errcode.CodeUnauthorized, "unauthorized: %s on a node without a fleet secret", headerPeerProof)
	}
	p, err := parsePeerProof(h)
	if err != nil {
		return p, err
	}
	if p.to != v.self {
		return p, errcode.Errorf(errcode.CodeUnauthorized, "unauthorized: peer proof is for node %s, this is node %s", p.to, v.self)
	}
	if skew := v.now().Sub(time.UnixMilli(p.ts)); skew > peerWindow || skew < -peerWindow {
		return p, errcode.Errorf(errcode.CodeUnauthorized, "unauthorized: peer proof from %s is %v off this node's clock, beyond ±%v: a replay, or the hosts' clocks differ (check NTP)", p.from, skew.Round(time.Millisecond), peerWindow)
	}
	return p, nil
}

// verify checks the proof's MAC over r and body, then its nonce: accepted
// once. A wrong MAC is refused before its nonce is remembered, so that no
// one without the key can fill the cache.
func (v *peerVerifier) verify(p peerProof, r *http.Request, body []byte) error {
	if !hmac.Equal(p.mac, requestMAC(v.key, p, r.Method, requestURI(r), r.Header, body)) {
		return errcode.Errorf(errcode.CodeUnauthorized, "unauthorized: peer proof from %s does not verify: another fleet secret, or the request was changed (method, path, query, body, target)", p.from)
	}
	now := v.now()
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, seen := v.nonces[p.nonce]; seen {
		return errcode.Errorf(errcode.CodeUnauthorized, "unauthorized: peer proof from %s replayed (its nonce was used already)", p.from)
	}
	if len(v.nonces) >= maxPeerNonces/2 && now.Sub(v.pruned) >= time.Second {
		for n, until := range v.nonces {
			if now.After(until) {
				delete(v.nonces, n)
			}
		}
		v.pruned = now
	}
	if len(v.nonces) >= maxPeerNonces {
		return errcode.Errorf(errcode.CodeUnavailable, "peer request from %s refused: %d peer requests within %v, the replay cache is full; not applied, retry", p.from, len(v.nonces), 2*peerWindow)
	}
	// The proof is good until its timestamp leaves the window, which is
	// at most ts+window of this clock.
	v.nonces[p.nonce] = time.UnixMilli(p.ts).Add(peerWindow + time.Second)
	return nil
}

// answerBuffer holds a peer's answer until it is whole, so that its proof
// (over status and body) goes out in a header before it.
type answerBuffer struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (a *answerBuffer) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
}

func (a *answerBuffer) Write(p []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.body.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (a *answerBuffer) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// finish signs the answer to the request of nonce and sends it.
func (a *answerBuffer) finish(key []byte, nonce string) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	h := a.ResponseWriter.Header()
	h.Set(headerPeerAnswer, hex.EncodeToString(answerMAC(key, nonce, a.status, h.Get(HeaderNode), a.body.Bytes())))
	a.ResponseWriter.WriteHeader(a.status)
	_, _ = a.ResponseWriter.Write(a.body.Bytes())
}

// answerVerified reports whether resp's answer, with body raw, is proved by
// a peer holding the fleet secret, for the request of nonce.
func answerVerified(key []byte, nonce string, resp *http.Response, raw []byte) bool {
	got, err := hex.DecodeString(resp.Header.Get(headerPeerAnswer))
	if err != nil || len(got) != sha256.Size {
		return false
	}
	return hmac.Equal(got, answerMAC(key, nonce, resp.StatusCode, resp.Header.Get(HeaderNode), raw))
}
