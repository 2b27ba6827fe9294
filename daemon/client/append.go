package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/deedkit/deed/errcode"
)

// DefaultRetryFor is how long an append is retried when the caller's
// context has no deadline (Options.RetryFor).
const DefaultRetryFor = 30 * time.Second

// The headers of idempotent appends (the daemon's HeaderIdempotencyKey and
// HeaderReplayed).
const (
	headerKey      = "Idempotency-Key"
	headerReplayed = "Idempotent-Replayed"
)

// AppendOptions are the conditions of an append.
type AppendOptions struct {
	// Key is the idempotency key (1 to 255 printable ASCII bytes): an
	// append with a key that landed within the daemon's idempotency window
	// is answered with the first one's result, and nothing is written
	// again, whichever node holds the cell now. "" makes the client
	// generate one for this call, so that its own retries are safe.
	Key string
	// MatchPos, when not 0, makes the append land only if its first record
	// gets this position (the log's next); otherwise it is refused with
	// DEED-E044, applied no, and Error.NextPos names the next position.
	MatchPos uint64
}

// Append appends one record (at least one byte) to cell's log and returns
// where it landed once it is durable, exactly once: it sends the record
// with an idempotency key of its own and, when the outcome is unknown
// (DEED-E012) or the refusal is one a retry can cure (the store or the
// holder unreachable, the cell changing hands), sends it again with the
// same key until it has an answer or the context ends (Options.RetryFor
// when it has no deadline). So an error is final: Applied "no" means it
// was not written; "unknown" (DEED-E012) only when the time ran out with
// an attempt's outcome unknown. The daemon claims the cell first when no
// live node holds it.
func (c *Client) Append(ctx context.Context, cell string, record []byte) (AppendResult, error) {
	return c.AppendWith(ctx, cell, record, AppendOptions{})
}

// AppendWith is Append with the caller's key or position condition.
func (c *Client) AppendWith(ctx context.Context, cell string, record []byte, opts AppendOptions) (AppendResult, error) {
	var v AppendResult
	hdr, err := c.retry(ctx, opts, func(ctx context.Context, h http.Header, q url.Values) (http.Header, error) {
		v = AppendResult{}
		return c.doHeader(ctx, http.MethodPost, cellPath(cell, "/append"), q, bytes.NewReader(record), h, &v)
	})
	if err == nil {
		v.Replayed = hdr.Get(headerReplayed) == "true"
	}
	return v, err
}

// AppendBatch appends records (1 to 4,096, within the daemon's body limit)
// atomically: one transaction, contiguous positions, all durable or none.
// It retries as Append does; opts applies to the batch as a whole.
func (c *Client) AppendBatch(ctx context.Context, cell string, records [][]byte, opts AppendOptions) (BatchResult, error) {
	in := BatchRequest{Records: make([]BatchRecord, len(records))}
	for i, r := range records {
		in.Records[i].Data = r
	}
	body, err := json.Marshal(in)
	if err != nil {
		return BatchResult{}, newError(errcode.CodeBadRequest, 0, "encode batch: %w", err)
	}
	var v BatchResult
	hdr, err := c.retry(ctx, opts, func(ctx context.Context, h http.Header, q url.Values) (http.Header, error) {
		v = BatchResult{}
		h.Set("Content-Type", "application/json")
		return c.doHeader(ctx, http.MethodPost, cellPath(cell, "/batch"), q, bytes.NewReader(body), h, &v)
	})
	if err == nil {
		v.Replayed = hdr.Get(headerReplayed) == "true"
	}
	return v, err
}

// retryable reports whether a refusal may go away on its own: the store or
// the node that holds the cell unreachable, the cell changing hands under
// the request. A retry sends the same key, so it cannot duplicate.
func retryable(code errcode.Code) bool {
	switch code {
	case errcode.CodeUnavailable, errcode.CodeAmbiguous, errcode.CodePeer, errcode.CodeSuperseded, errcode.CodeReleased, errcode.CodeNodeFenced:
		return true
	}
	return false
}

// readRetryable reports whether a read's refusal may be cured by sending
// it again: applied "no" (a read's always is) and a code that says the
// node, its peer or the cell is between states — DEED-E011 (retry: the
// cell is moving, the node starting or draining), DEED-E013 (the peer
// serving the cell could not be reached), DEED-E025 (the node is fenced).
func readRetryable(err error) bool {
	switch errcode.CodeOf(err) {
	case errcode.CodeUnavailable, errcode.CodePeer, errcode.CodeNodeFenced:
		var e *Error
		return (!errors.As(err, &e) || e.Applied != AppliedUnknown) && !untrusted(err)
	}
	return false
}

// retryRead sends a read until it is answered or refused for good, or the
// context ends (RetryFor when it has no deadline), with the backoff of an
// append; the last refusal is the answer.
func (c *Client) retryRead(ctx context.Context, send func(context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok && c.retryFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.retryFor)
		defer cancel()
	}
	for attempt := 0; ; attempt++ {
		err := send(ctx)
		if err == nil || c.retryFor < 0 || !readRetryable(err) {
			return err
		}
		t := time.NewTimer(backoff(attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// backoff is the wait before retry attempt+1: doubling from 50 ms up to
// 2 s, jittered over its upper half so that clients refused together do
// not come back together.
func backoff(attempt int) time.Duration {
	d := min(50*time.Millisecond<<min(attempt, 6), 2*time.Second)
	return d/2 + rand.N(d/2+1)
}

// validKey is the daemon's check of a key (replication.ValidateKey), made
// before anything is sent.
func validKey(k string) error {
	if len(k) == 0 || len(k) > 255 || k[0] == ' ' || k[len(k)-1] == ' ' {
		return newError(errcode.CodeBadRequest, 0, "idempotency key of %d bytes: want 1..255 printable ASCII, not starting or ending with a space", len(k))
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return newError(errcode.CodeBadRequest, 0, "idempotency key: byte %d (0x%02x) is not printable ASCII", i, k[i])
		}
	}
	return nil
}

// NewKey returns a fresh idempotency key (32 hex digits).
func NewKey() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// wrapUnknown is the DEED-E012 answer of a retried append whose outcome
// stayed unknown: it wraps the attempt that made it so, and says its code
// once (the inner message is given without its code: see msgOf).
func wrapUnknown(unknown error, format string, args ...any) *Error {
	e := newError(errcode.CodeAmbiguous, 0, format, args...)
	e.Err = unknown
	return e
}

// msgOf is err's message without its leading code, for a message that
// already starts with one.
func msgOf(err error) string {
	msg := err.Error()
	if c := errcode.CodeOf(err); c != "" {
		msg = strings.TrimPrefix(strings.TrimPrefix(msg, string(c)), " ")
	}
	return msg
}

// retry sends an append with one key until its outcome is known.
func (c *Client) retry(ctx context.Context, opts AppendOptions, send func(context.Context, http.Header, url.Values) (http.Header, error)) (http.Header, error) {
	key := opts.Key
	if key == "" {
		key = NewKey()
	} else if err := validKey(key); err != nil {
		return nil, err
	}
	q := url.Values{}
	if opts.MatchPos != 0 {
		q.Set("match_pos", strconv.FormatUint(opts.MatchPos, 10))
	}
	if _, ok := ctx.Deadline(); !ok && c.retryFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.retryFor)
		defer cancel()
	}
	var unknown error // the last attempt whose outcome is unknown
	for attempt := 0; ; attempt++ {
		h := http.Header{headerKey: {key}}
		hdr, err := send(ctx, h, q)
		if err == nil {
			return hdr, nil
		}
		code := errcode.CodeOf(err)
		if code == errcode.CodeAmbiguous {
			unknown = err
		}
		if !retryable(code) || c.retryFor < 0 || untrusted(err) {
			if unknown != nil && code != errcode.CodeAmbiguous && code != errcode.CodePosMismatch && code != errcode.CodeKeyReused {
				// An earlier attempt may have landed: this refusal does
				// not say it did not.
				return nil, wrapUnknown(unknown, "outcome unknown (key %q): an attempt's outcome is unknown (%s), the last was refused: %s", key, msgOf(unknown), msgOf(err))
			}
			return nil, err
		}
		t := time.NewTimer(backoff(attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if unknown != nil {
				return nil, wrapUnknown(unknown, "outcome unknown (key %q): out of time (%v); retry with the same key to learn it: %s", key, ctx.Err(), msgOf(unknown))
			}
			return nil, err
		}
	}
}
