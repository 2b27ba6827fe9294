package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/deedkit/deed/errcode"
)

// DefaultTimeout bounds one request when Options.HTTPClient is nil. An
// append answers only once durable, so it is generous.
const DefaultTimeout = 60 * time.Second

// Options configure a Client.
type Options struct {
	// Token is the daemon's bearer token ("" when it requires none);
	// surrounding whitespace (a token file's newline) is ignored.
	Token string
	// HTTPClient sends the requests; nil means one with DefaultTimeout.
	// Set it to trust a private CA for an https address.
	HTTPClient *http.Client
	// RetryFor bounds how long Append and AppendBatch retry (with the same
	// idempotency key), and Read retries a refusal a retry can cure, when
	// the caller's context has no deadline: DefaultRetryFor when 0; a
	// negative value sends each append and read once.
	RetryFor time.Duration
}

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	base     string
	token    string
	hc       *http.Client
	retryFor time.Duration
}

// New returns a client of the daemon at base, "http(s)://HOST:PORT". A
// base that is not such a URL is DEED-E040, before any request.
func New(base string, opts Options) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, newError(errcode.CodeBadRequest, 0, "daemon address %q: want http(s)://HOST:PORT of a running 'deed run'", redactURL(base))
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: DefaultTimeout}
	}
	rf := opts.RetryFor
	if rf == 0 {
		rf = DefaultRetryFor
	}
	return &Client{base: strings.TrimSuffix(base, "/"), token: strings.TrimSpace(opts.Token), hc: hc, retryFor: rf}, nil
}

// ReadOptions select the records of a Read.
type ReadOptions struct {
	// After is the position the read starts after (0: from the start).
	After uint64
	// Limit is the most records to return; 0 means the daemon's default
	// (100).
	Limit int
	// Barrier makes the read linearizable: the daemon must hold the cell
	// (else DEED-E024), and it fails with DEED-E021 when a newer epoch has
	// fenced it.
	Barrier bool
	// Wait, when no record after After is committed yet, makes the daemon
	// wait up to this long (at most 60 s) for one and answer as soon as
	// one is (long polling); empty when it runs out. Keep it below the
	// HTTP client's timeout (DefaultTimeout).
	Wait time.Duration
}

// Read returns the records of cell's log after opts.After, in order. Fewer
// than the limit means the end of the log, for now. A refusal a retry can
// cure (DEED-E011, DEED-E013, DEED-E025: the cell moving, a node starting,
// draining, fenced or unreachable) is retried with jittered backoff while
// the context lasts (Options.RetryFor when it has no deadline; negative:
// sent once).
func (c *Client) Read(ctx context.Context, cell string, opts ReadOptions) (ReadResult, error) {
	q := url.Values{"after": {strconv.FormatUint(opts.After, 10)}}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Barrier {
		q.Set("barrier", "true")
	}
	if opts.Wait > 0 {
		q.Set("wait", opts.Wait.String())
	}
	var v ReadResult
	err := c.retryRead(ctx, func(ctx context.Context) error {
		v = ReadResult{}
		return c.do(ctx, http.MethodGet, cellPath(cell, "/records"), q, nil, &v)
	})
	return v, err
}

// Claim makes the daemon claim cell (force: even from a live owner, which
// bumps the epoch and fences it).
func (c *Client) Claim(ctx context.Context, cell string, force bool) (Claim, error) {
	var q url.Values
	if force {
		q = url.Values{"force": {"true"}}
	}
	var v Claim
	err := c.do(ctx, http.MethodPost, cellPath(cell, "/claim"), q, nil, &v)
	return v, err
}

// Release makes the daemon seal cell's log and release it, so a peer can
// claim it at once. DEED-E024 when the daemon does not hold it.
func (c *Client) Release(ctx context.Context, cell string) (Released, error) {
	var v Released
	err := c.do(ctx, http.MethodPost, cellPath(cell, "/release"), nil, nil, &v)
	return v, err
}

// Cells lists the cells the daemon holds.
func (c *Client) Cells(ctx context.Context) (HeldCells, error) {
	var v HeldCells
	err := c.do(ctx, http.MethodGet, "/v1/cells", nil, nil, &v)
	return v, err
}

// Cell describes cell's ownership as the daemon sees it.
func (c *Client) Cell(ctx context.Context, cell string) (CellInfo, error) {
	var v CellInfo
	err := c.do(ctx, http.MethodGet, cellPath(cell, ""), nil, nil, &v)
	return v, err
}

// Move makes the daemon that holds cell hand it off to node to, which keeps
// it pinned (against its rebalancer) while it holds it. A cell held nowhere
// is claimed on to directly.
func (c *Client) Move(ctx context.Context, cell, to string) (Moved, error) {
	var v Moved
	err := c.do(ctx, http.MethodPost, cellPath(cell, "/move"), url.Values{"to": {to}}, nil, &v)
	return v, err
}

// Drain turns the daemon's drain on (it hands off every cell and takes no
// new ones) or off.
func (c *Client) Drain(ctx context.Context, on bool) (NodeState, error) {
	method := http.MethodPost
	if !on {
		method = http.MethodDelete
	}
	var v NodeState
	err := c.do(ctx, method, "/v1/node/drain", nil, nil, &v)
	return v, err
}
