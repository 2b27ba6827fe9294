package daemon

import (
	"context"
	"io"
	"net/http"
	"strings"

	"github.com/deedkit/deed/errcode"
)

// Headers between the daemons of a fleet.
const (
	// HeaderNode names the node that served a request, on every answer.
	HeaderNode = "Deed-Node"
	// headerPeerToken carries Config.FleetSecret on a request from a peer;
	// only a request with the right secret is treated as a peer's.
	headerPeerToken = "Deed-Peer-Token"
	// headerFrom names the peer node that sent a request.
	headerFrom = "Deed-From"
)

// newPeerRequest builds a request to the peer at addr (its advertised
// address, e.g. "http://10.0.0.2:7480") that carries the fleet secret, so
// the peer accepts it as a peer's. DEED-E011 when the fleet is off: no
// request between daemons is ever sent unauthenticated.
func (d *Daemon) newPeerRequest(ctx context.Context, addr, method, path string, body io.Reader) (*http.Request, error) {
	if d.cfg.FleetSecret == "" {
		return nil, errcode.Errorf(errcode.CodeUnavailable, "no fleet secret configured: node %s does not talk to peers", d.cfg.Node)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(addr, "/")+path, body)
	if err != nil {
		return nil, errcode.Errorf(errcode.CodeUnavailable, "peer request to %s: %v", addr, err)
	}
	req.Header.Set(headerPeerToken, d.cfg.FleetSecret)
	req.Header.Set(headerFrom, d.cfg.Node)
	return req, nil
}
