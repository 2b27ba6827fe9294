package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/bucket"
)

// The daemon client used by append and read.

const (
	envAddr     = "DEED_ADDR"
	defaultAddr = "http://127.0.0.1:7480"
	// apiTimeout bounds one request to the daemon. An append answers only
	// once durable, so it is generous.
	apiTimeout = 60 * time.Second
)

// apiFlags are the flags of the commands that talk to a daemon.
type apiFlags struct {
	addr      string
	token     string
	tokenFile string
	caCert    string
}

func (f *apiFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.addr, "addr", defaultAddr, "base URL of a running 'deed run' (env "+envAddr+")")
	cmd.Flags().StringVar(&f.token, "token", "", "bearer token of the daemon's API (env "+envToken+")")
	cmd.Flags().StringVar(&f.tokenFile, "token-file", "", "read the bearer token from this file instead (trailing newline ignored)")
	cmd.Flags().StringVar(&f.caCert, "ca-cert", "", "PEM file of the CA (or the self-signed certificate) to trust for an https --addr, instead of the system's")
}

// apiClient talks to one daemon.
type apiClient struct {
	base  string
	token string
	hc    *http.Client
}

// client resolves --addr and --token against the environment and checks the
// address; a bad one is DEED-E040 before any request.
func (f *apiFlags) client(cfg *config, cmd *cobra.Command) (*apiClient, error) {
	addr, token := f.addr, f.token
	if !cmd.Flags().Changed("addr") {
		addr = firstNonEmpty(cfg.getenv(envAddr), defaultAddr)
	}
	switch {
	case f.tokenFile != "" && cmd.Flags().Changed("token"):
		return nil, errBothTokens()
	case f.tokenFile != "":
		t, err := readTokenFile(f.tokenFile)
		if err != nil {
			return nil, err
		}
		token = t
	case !cmd.Flags().Changed("token"):
		token = cfg.getenv(envToken)
	}
	token = strings.TrimSpace(token) // from a file or the environment, with its newline
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, bucket.Errorf(bucket.CodeBadRequest, "--addr %q: want http(s)://HOST:PORT of a running 'deed run'", redactURL(addr))
	}
	hc := &http.Client{Timeout: apiTimeout}
	if f.caCert != "" {
		if u.Scheme != "https" {
			return nil, bucket.Errorf(bucket.CodeBadRequest, "--ca-cert is for an https --addr, not %s", addr)
		}
		pool, err := caPool(f.caCert)
		if err != nil {
			return nil, err
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		hc.Transport = tr
	}
	return &apiClient{base: strings.TrimSuffix(addr, "/"), token: token, hc: hc}, nil
}

// do sends one request and decodes a 2xx JSON answer into out. An error
// answer {"code","error"} becomes the same coded error the daemon reported,
// so the exit status is the one the command would have had locally.
func (c *apiClient) do(ctx context.Context, method, path string, query url.Values, body io.Reader, out any) error {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return bucket.Errorf(bucket.CodeBadRequest, "%s %s: %w", method, u, err)
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
			return bucket.Errorf(bucket.CodeAmbiguous, "%s %s: outcome unknown: the daemon at %s got the request but its answer was lost: %w", method, path, c.redactedBase(), err)
		}
		return bucket.Errorf(bucket.CodeUnavailable, "cannot reach the daemon at %s: %w", c.redactedBase(), err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		if write {
			return bucket.Errorf(bucket.CodeAmbiguous, "%s %s: outcome unknown: the daemon's answer (%s) was cut off: %w", method, path, resp.Status, err)
		}
		return bucket.Errorf(bucket.CodeUnavailable, "read the daemon's answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return apiError(resp, raw, write)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		code := bucket.CodeUnavailable
		if write {
			code = bucket.CodeAmbiguous // it answered 2xx: the write may well have landed
		}
		return bucket.Errorf(code, "the daemon at %s answered %s with something that is not deed's JSON: %.200q", c.redactedBase(), path, raw)
	}
	return nil
}

// apiError turns an error answer into a coded error. write says the
// request was a write: an answer that does not say it was refused (deed's
// body with "applied": "no") leaves its outcome unknown.
func apiError(resp *http.Response, raw []byte, write bool) error {
	var e errorBody
	if err := json.Unmarshal(raw, &e); err == nil && strings.HasPrefix(string(e.Code), "DEED-E") {
		msg := strings.TrimSpace(e.Error)
		if msg == "" {
			msg = resp.Status
		}
		if write && e.Applied == appliedUnknown && e.Code != bucket.CodeAmbiguous {
			// A daemon that says "unknown" under another code: the
			// outcome is what counts.
			return bucket.Errorf(bucket.CodeAmbiguous, "outcome unknown: %s", msg)
		}
		return bucket.Errorf(e.Code, "%s", msg)
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
	return bucket.Errorf(code, "the daemon answered %s: %.200q", resp.Status, raw)
}

// redactedBase is the daemon's URL as it may be printed: a password in
// it is masked.
func (c *apiClient) redactedBase() string { return redactURL(c.base) }

// redactURL masks the password of a URL with user:pass@ in it, for every
// message and log line that names an endpoint; anything that does not
// parse as a URL is returned as it is, as it can carry no userinfo that
// url.Parse would find.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}

// cellPath is the API path of a cell (names are validated: no escaping
// needed, but escape anyway).
func cellPath(cell, rest string) string {
	return "/v1/cells/" + url.PathEscape(cell) + rest
}
