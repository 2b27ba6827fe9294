package daemon

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/deedkit/deed/errcode"
)

// Headers between the daemons of a fleet.
const (
	// HeaderNode names the node that served a request, on every answer.
	HeaderNode = "Deed-Node"
	// headerPeerToken carried the fleet secret itself on a peer request
	// before peer proofs (headerPeerProof); a request with it is refused.
	headerPeerToken = "Deed-Peer-Token"
)

// peerRequest is a request to a peer, sent by sendPeer.
type peerRequest struct {
	req  *http.Request
	to   string // the node it is for
	body []byte
}

// newPeerRequest builds a request to the peer node to at addr (its
// advertised address, e.g. "http://10.0.0.2:7480"). DEED-E011 when the
// fleet is off: no request between daemons is ever sent unauthenticated.
// Set the headers it needs, then sendPeer signs and sends it.
func (d *Daemon) newPeerRequest(ctx context.Context, to, addr, method, path string, body []byte) (*peerRequest, error) {
	if d.cfg.FleetSecret == "" {
		return nil, errcode.Errorf(errcode.CodeUnavailable, "no fleet secret configured: node %s does not talk to peers", d.cfg.Node)
	}
	var rd io.Reader
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(addr, "/")+path, rd)
	if err != nil {
		return nil, errcode.Errorf(errcode.CodeUnavailable, "peer request to %s: %v", addr, err)
	}
	return &peerRequest{req: req, to: to, body: body}, nil
}

// sendPeer signs pr with a peer proof and sends it; nonce is the proof's,
// which the answer's proof must name (answerVerified).
func (d *Daemon) sendPeer(pr *peerRequest) (resp *http.Response, nonce string, err error) {
	p := signPeerRequest(d.peers.key, pr.req, d.cfg.Node, pr.to, pr.body, time.Now())
	resp, err = d.peerClient().Do(pr.req)
	return resp, p.nonce, err
}
