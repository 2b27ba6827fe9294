// Package wait is the waiting deed's retry loops share: a sleep that ends
// when its context does, exponential backoff, and a retry loop built from
// the two. It is internal: its shape follows deed's callers, not a promise.
package wait

import (
	"context"
	"math/rand/v2"
	"time"
)

// Sleep pauses for d, or less when ctx ends first; then it returns
// ctx.Err(), so a loop stops as soon as its caller gave up. A pause of
// d <= 0 returns nil at once.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Backoff is exponential: the pause before retry i (0-based) is Min<<i,
// capped at Max (no cap when Max is 0). Jitter spreads each pause over
// ±25% so that clients that failed together do not retry together.
type Backoff struct {
	Min, Max time.Duration
	Jitter   bool
}

// Delay is the pause before retry i.
func (b Backoff) Delay(i int) time.Duration {
	d := b.Min << min(max(i, 0), 20)
	if b.Max > 0 && (d > b.Max || d <= 0) {
		d = b.Max
	}
	if b.Jitter && d > 0 {
		d = d - d/4 + rand.N(d/2+1)
	}
	return d
}

// Retry runs op until it succeeds, until final(err) says an error will not
// go away by retrying, until attempts tries have run (attempts <= 0: no
// bound) or until ctx ends, pausing b.Delay(i) between tries. It returns
// op's last error (nil on success), never ctx's: the caller learns what the
// store said, not only that time ran out. final may be nil (every error is
// retried).
func Retry(ctx context.Context, attempts int, b Backoff, final func(error) bool, op func(ctx context.Context) error) error {
	for i := 0; ; i++ {
		err := op(ctx)
		if err == nil || (final != nil && final(err)) {
			return err
		}
		if ctx.Err() != nil || (attempts > 0 && i+1 >= attempts) {
			return err
		}
		if Sleep(ctx, b.Delay(i)) != nil {
			return err
		}
	}
}
