package client

import (
	"bytes"
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/deedkit/deed/errcode"
)

// followWait is the wait of each read Follow sends: well below
// DefaultTimeout, so that an empty answer comes back before the client
// gives up on it.
const followWait = 25 * time.Second

// followRetry bounds the pause between Follow's reads after a failure.
const (
	followRetryMin = 100 * time.Millisecond
	followRetryMax = 5 * time.Second
)

// Follow returns the records of cell after position after, in order, each
// once, and then every record committed later, as it is committed: it
// reads with Wait (long polling), so a record appended on the holder
// reaches it at once. It resumes by itself where it stopped after a
// failure that a retry can mend — the store or a node unreachable
// (DEED-E011, DEED-E013), a node at its bound of waiting reads
// (DEED-E014), the cell moving or changing owner (DEED-E021, DEED-E022,
// DEED-E025) — pausing 100 ms, doubling to 5 s. It ends when ctx ends
// (without an error) or on a failure a retry cannot mend (a bad name, a
// refused token, a position below the cell's trim point — DEED-E046, whose
// Error.FirstPos says where the records still served begin: restore from
// Snapshot and follow from its position), which it yields with a zero
// Record. Stopping the range loop stops it.
func (c *Client) Follow(ctx context.Context, cell string, after uint64) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		pause := followRetryMin
		for ctx.Err() == nil {
			ans, err := c.Read(ctx, cell, ReadOptions{After: after, Wait: followWait})
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if !followRetryable(errcode.CodeOf(err)) {
					yield(Record{}, err)
					return
				}
				t := time.NewTimer(pause)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				pause = min(2*pause, followRetryMax)
				continue
			}
			pause = followRetryMin
			for _, rec := range ans.Records {
				if rec.Pos <= after {
					continue // never twice, whatever a node answers
				}
				after = rec.Pos
				if !yield(rec, nil) {
					return
				}
			}
		}
	}
}

// followRetryable reports whether Follow reads again after code.
func followRetryable(code errcode.Code) bool {
	switch code {
	case errcode.CodeUnavailable, errcode.CodePeer, errcode.CodeBusy, errcode.CodeAmbiguous,
		errcode.CodeSuperseded, errcode.CodeReleased, errcode.CodeNodeFenced, errcode.CodeNotHolder, errcode.CodeHeld:
		return true
	}
	return false
}

// Tail returns where cell's log ends, from its holder after a barrier
// (linearizable).
func (c *Client) Tail(ctx context.Context, cell string) (Tail, error) {
	var v Tail
	err := c.do(ctx, http.MethodGet, cellPath(cell, "/tail"), nil, nil, &v)
	return v, err
}

// PutSnapshot writes state as the snapshot of cell covering every record
// up to and including position upTo (the last record of its transaction).
func (c *Client) PutSnapshot(ctx context.Context, cell string, upTo uint64, state []byte) (SnapshotResult, error) {
	var v SnapshotResult
	q := url.Values{"upto": {strconv.FormatUint(upTo, 10)}}
	err := c.do(ctx, http.MethodPut, cellPath(cell, "/snapshot"), q, bytes.NewReader(state), &v)
	return v, err
}

// Snapshot returns the state of cell's newest snapshot and the last
// position it covers (read records after it); DEED-E045 when there is
// none.
func (c *Client) Snapshot(ctx context.Context, cell string) (state []byte, pos uint64, err error) {
	var buf rawBody
	h, err := c.doHeader(ctx, http.MethodGet, cellPath(cell, "/snapshot"), nil, nil, nil, &buf)
	if err != nil {
		return nil, 0, err
	}
	pos, err = strconv.ParseUint(h.Get("Deed-Snapshot-Pos"), 10, 64)
	if err != nil {
		return nil, 0, newError(errcode.CodeUnavailable, 0, "snapshot of %s: the answer names no position (Deed-Snapshot-Pos %q)", cell, h.Get("Deed-Snapshot-Pos"))
	}
	return buf.b, pos, nil
}

// rawBody is an answer kept as its bytes, not decoded as JSON.
type rawBody struct{ b []byte }
