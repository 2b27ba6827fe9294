package replication

import (
	"context"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/owner"
)

// Announce does only the first step of Open for lease: it creates the
// epoch's announcement marker, as an owner that then crashes would.
func Announce(ctx context.Context, b bucket.Bucket, lease *owner.Lease) error {
	l := &Log{s: makeStore(b, lease.Cell(), nil), lease: lease, epoch: lease.Epoch()}
	return l.announce(ctx)
}

// KeysInFlight is how many keyed appends l holds as queued or in flight.
func KeysInFlight(l *Log) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.x == nil || l.x.ks == nil {
		return 0
	}
	return len(l.x.ks.flight)
}
