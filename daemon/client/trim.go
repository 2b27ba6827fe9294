package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// TrimOptions are the options of Trim.
type TrimOptions struct {
	// PastSnapshot lets the trim point pass the newest snapshot's
	// successor: records no snapshot covers then stop being served too
	// (their files stay until a snapshot covers them). Without it such a
	// trim is refused (DEED-E040), nothing trimmed.
	PastSnapshot bool
}

// Trim raises cell's trim point to before: records at positions below it
// are no longer served (a read that starts below it is refused with
// DEED-E046, Error.FirstPos naming the first position served), and the
// holder deletes, in the background, the files wholly below it that the
// newest snapshot covers. The point never moves back; the answer is the
// point in effect, which may be higher than before. A point past the
// committed tail is refused (DEED-E040). A Follow that started below the
// point ends with that DEED-E046: start again from Snapshot's position, or
// from FirstPos − 1.
func (c *Client) Trim(ctx context.Context, cell string, before uint64, opts TrimOptions) (TrimResult, error) {
	var v TrimResult
	q := url.Values{"before": {strconv.FormatUint(before, 10)}}
	if opts.PastSnapshot {
		q.Set("past_snapshot", "true")
	}
	err := c.do(ctx, http.MethodPost, cellPath(cell, "/trim"), q, nil, &v)
	return v, err
}
