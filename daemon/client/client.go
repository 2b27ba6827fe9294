package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/deedkit/deed/errcode"
)

// The request and its answer, shared by every call of a Client.

// do sends one request and decodes a 2xx JSON answer into out. An error
// answer {"code","error"} becomes the same coded error the daemon reported,
// so the exit status is the one the command would have had locally.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body io.Reader, out any) error {
	_, err := c.doHeader(ctx, method, path, query, body, nil, out)
	return err
}

// doHeader is do with extra request headers; it returns the answer's
// headers (nil when there was no answer).
func (c *Client) doHeader(ctx context.Context, method, path string, query url.Values, body io.Reader, hdr http.Header, out any) (http.Header, error) {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, newError(errcode.CodeBadRequest, 0, "%s %s: %w", method, u, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	for k, vs := range hdr {
		req.Header[k] = vs
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
			return nil, newError(errcode.CodeAmbiguous, 0, "%s %s: outcome unknown: the daemon at %s got the request but its answer was lost: %w", method, path, c.redactedBase(), err)
		}
		if untrusted(err) {
			return nil, newError(errcode.CodeUnavailable, 0, "cannot reach the daemon at %s: its TLS certificate is not trusted (give the CA that signed it, or the certificate itself: deed's --ca-cert): %w", c.redactedBase(), err)
		}
		return nil, newError(errcode.CodeUnavailable, 0, "cannot reach the daemon at %s: %w", c.redactedBase(), err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		if write {
			return resp.Header, newError(errcode.CodeAmbiguous, resp.StatusCode, "%s %s: outcome unknown: the daemon's answer (%s) was cut off: %w", method, path, resp.Status, err)
		}
		return resp.Header, newError(errcode.CodeUnavailable, resp.StatusCode, "read the daemon's answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return resp.Header, apiError(resp, raw, write)
	}
	if rb, ok := out.(*rawBody); ok {
		rb.b = raw // an answer that is not JSON (a snapshot's state)
		return resp.Header, nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		code := errcode.CodeUnavailable
		if write {
			code = errcode.CodeAmbiguous // it answered 2xx: the write may well have landed
		}
		return resp.Header, newError(code, resp.StatusCode, "the daemon at %s answered %s with something that is not deed's JSON: %.200q", c.redactedBase(), path, raw)
	}
	return resp.Header, nil
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
		if write && e.Applied == AppliedUnknown && e.Code != errcode.CodeAmbiguous {
			// A daemon that says "unknown" under another code: the
			// outcome is what counts.
			return newError(errcode.CodeAmbiguous, resp.StatusCode, "outcome unknown: %s", msg)
		}
		ce := newError(e.Code, resp.StatusCode, "%s", msg)
		ce.Owner, ce.OwnerAddr = e.Owner, e.OwnerAddr
		if e.NextPos != nil {
			ce.NextPos = *e.NextPos
		}
		if e.FirstPos != nil {
			ce.FirstPos = *e.FirstPos
		}
		return ce
	}
	// Not deed's error body: a proxy, or not a daemon at all.
	if s3Answer(resp, raw) && resp.StatusCode < 500 {
		// The store's own refusal (an unsigned request, usually 403): the
		// address is the store's, so nothing reached a daemon.
		return newError(errcode.CodeBadRequest, resp.StatusCode,
			"%s is an S3 store, not a deed daemon (it answered %s with an S3 error): give the daemon's API address (deed run --listen; the CLI's --addr or DEED_ADDR, default %s), and the store's only as --endpoint",
			redactURL(resp.Request.URL.Scheme+"://"+resp.Request.URL.Host), resp.Status, "http://127.0.0.1:7480")
	}
	code := errcode.CodeUnavailable
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		code = errcode.CodeUnauthorized
	case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusNotFound ||
		resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusRequestEntityTooLarge:
		code = errcode.CodeBadRequest
	case write:
		// A proxy's 502/504 (or anything else it did not refuse outright)
		// may have come after it forwarded the request.
		code = errcode.CodeAmbiguous
	}
	return newError(code, resp.StatusCode, "the daemon answered %s: %.200q", resp.Status, raw)
}

// s3Answer reports whether an answer is an S3 store's: its XML error
// document, or the request id header every S3 implementation sets.
func s3Answer(resp *http.Response, raw []byte) bool {
	if resp.Header.Get("X-Amz-Request-Id") != "" || resp.Header.Get("X-Amz-Id-2") != "" {
		return true
	}
	body := bytes.TrimSpace(raw)
	body = bytes.TrimPrefix(body, []byte(`<?xml version="1.0" encoding="UTF-8"?>`))
	return bytes.HasPrefix(bytes.TrimSpace(body), []byte("<Error>")) && bytes.Contains(body, []byte("<Code>"))
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

// untrusted reports whether err is a TLS handshake that failed because the
// daemon's certificate did not verify: a retry cannot cure it (until the
// client trusts another CA), so no retry loop waits it out.
func untrusted(err error) bool {
	var (
		cv *tls.CertificateVerificationError
		ua x509.UnknownAuthorityError
		he x509.HostnameError
		ci x509.CertificateInvalidError
	)
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci)
}
