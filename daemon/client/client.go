// Package client is a Go client for the HTTP API of a deed node daemon
// (`deed run`, package daemon), and the API's wire types, which the daemon
// serves. An application in Go talks to deed through it without writing
// JSON: every failure is an *Error that carries its DEED code and whether
// the request may have taken effect ("applied": no or unknown).
//
// The package depends only on the standard library and package bucket (for
// the codes), so importing it does not pull in the daemon.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/deedkit/deed/bucket"
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
}

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

// New returns a client of the daemon at base, "http(s)://HOST:PORT". A
// base that is not such a URL is DEED-E040, before any request.
func New(base string, opts Options) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, newError(bucket.CodeBadRequest, 0, "daemon address %q: want http(s)://HOST:PORT of a running 'deed run'", redactURL(base))
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: DefaultTimeout}
	}
	return &Client{base: strings.TrimSuffix(base, "/"), token: strings.TrimSpace(opts.Token), hc: hc}, nil
}

// Append appends one record (at least one byte) to cell's log and returns
// where it landed once it is durable. The daemon claims the cell first when
// no live node holds it. An *Error with Applied "unknown" (DEED-E012) means
// the record may have been written: read the log before sending it again.
func (c *Client) Append(ctx context.Context, cell string, record []byte) (AppendResult, error) {
	var v AppendResult
	err := c.do(ctx, http.MethodPost, cellPath(cell, "/append"), nil, bytes.NewReader(record), &v)
	return v, err
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
}

// Read returns the records of cell's log after opts.After, in order. Fewer
// than the limit means the end of the log, for now.
func (c *Client) Read(ctx context.Context, cell string, opts ReadOptions) (ReadResult, error) {
	q := url.Values{"after": {strconv.FormatUint(opts.After, 10)}}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Barrier {
		q.Set("barrier", "true")
	}
	var v ReadResult
	err := c.do(ctx, http.MethodGet, cellPath(cell, "/records"), q, nil, &v)
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

// do sends one request and decodes a 2xx JSON answer into out. An error
// answer {"code","error"} becomes the same coded error the daemon reported,
// so the exit status is the one the command would have had locally.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body io.Reader, out any) error {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return newError(bucket.CodeBadRequest, 0, "%s %s: %w", method, u, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	// A write whose request reached the daemon whole may have taken effect
	// whatever happens to its answer: from then on a lost answer is
	// DEED-E012, never a refusal.
	write := method != http.MethodGet && method != http.MethodHead
	var sent atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				sent.Store(true)
			}
		},
	}))
	resp, err := c.hc.Do(req)
	if err != nil {
		if write && sent.Load() {
			return newError(bucket.CodeAmbiguous, 0, "%s %s: outcome unknown: the daemon at %s got the request but its answer was lost: %w", method, path, c.redactedBase(), err)
		}
		return newError(bucket.CodeUnavailable, 0, "cannot reach the daemon at %s: %w", c.redactedBase(), err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		if write {
			return newError(bucket.CodeAmbiguous, resp.StatusCode, "%s %s: outcome unknown: the daemon's answer (%s) was cut off: %w", method, path, resp.Status, err)
		}
		return newError(bucket.CodeUnavailable, resp.StatusCode, "read the daemon's answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return apiError(resp, raw, write)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		code := bucket.CodeUnavailable
		if write {
			code = bucket.CodeAmbiguous // it answered 2xx: the write may well have landed
		}
		return newError(code, resp.StatusCode, "the daemon at %s answered %s with something that is not deed's JSON: %.200q", c.redactedBase(), path, raw)
	}
	return nil
}

// apiError turns an error answer into a coded error. write says the
// request was a write: an answer that does not say it was refused (deed's
// body with "applied": "no") leaves its outcome unknown.
func apiError(resp *http.Response, raw []byte, write bool) error {
	var e ErrorBody
	if err := json.Unmarshal(raw, &e); err == nil && strings.HasPrefix(string(e.Code), "DEED-E") {
		msg := strings.TrimSpace(e.Error)
		if msg == "" {
			msg = resp.Status
		}
		if write && e.Applied == AppliedUnknown && e.Code != bucket.CodeAmbiguous {
			// A daemon that says "unknown" under another code: the
			// outcome is what counts.
			return newError(bucket.CodeAmbiguous, resp.StatusCode, "outcome unknown: %s", msg)
		}
		ce := newError(e.Code, resp.StatusCode, "%s", msg)
		ce.Owner, ce.OwnerAddr = e.Owner, e.OwnerAddr
		return ce
	}
	// Not deed's error body: a proxy, or not a daemon at all.
	code := bucket.CodeUnavailable
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		code = bucket.CodeUnauthorized
	case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusNotFound ||
		resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusRequestEntityTooLarge:
		code = bucket.CodeBadRequest
	case write:
		// A proxy's 502/504 (or anything else it did not refuse outright)
		// may have come after it forwarded the request.
		code = bucket.CodeAmbiguous
	}
	return newError(code, resp.StatusCode, "the daemon answered %s: %.200q", resp.Status, raw)
}

// redactedBase is the daemon's URL as it may be printed: a password in
// it is masked.
func (c *Client) redactedBase() string { return redactURL(c.base) }

// redactURL masks the password of a URL with user:pass@ in it, for every
// message that names the daemon's address. Of a string that does not parse
// as a URL, whatever lies between "://" and the last "@" is masked whole.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		i, j := strings.Index(s, "://"), strings.LastIndex(s, "@")
		if i >= 0 && j > i {
			return s[:i+3] + "xxxxx" + s[j:]
		}
		return s
	}
	if u.User == nil {
		return s
	}
	return u.Redacted()
}

// cellPath is the API path of a cell (names are validated: no escaping
// needed, but escape anyway).
func cellPath(cell, rest string) string {
	return "/v1/cells/" + url.PathEscape(cell) + rest
}
