package replication_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/s3test"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

func TestMain(m *testing.M) { s3test.Main(m) }

const cell = "c1"

// claim makes node name (never opened: dead to its peers, so anyone may
// take over) claim cell on b, forcing when force is set.
func claim(t testing.TB, b bucket.Bucket, name string, force bool) *owner.Lease {
	t.Helper()
	n, err := owner.NewNode(b, owner.Config{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	l, err := n.Claim(context.Background(), cell, owner.ClaimOptions{Force: force})
	if err != nil {
		t.Fatalf("claim by %s: %v", name, err)
	}
	return l
}

func open(t testing.TB, b bucket.Bucket, l *owner.Lease, opts ...replication.Option) *replication.Log {
	t.Helper()
	lg, err := replication.Open(context.Background(), b, l, opts...)
	if err != nil {
		t.Fatalf("open epoch %d: %v", l.Epoch(), err)
	}
	t.Cleanup(func() {
		// Bounded, so that a test failing with a write still unresolved
		// fails instead of hanging (virtual time under synctest).
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = lg.Close(ctx)
	})
	return lg
}

func mustCode(t testing.TB, err error, code errcode.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", code)
	}
	if got := errcode.CodeOf(err); got != code {
		t.Fatalf("got %s (%v), want %s", got, err, code)
	}
	if !strings.HasPrefix(err.Error(), string(code)) {
		t.Fatalf("message %q does not start with %s", err, code)
	}
}

// ledger tracks which records were acknowledged and which refused.
type ledger struct {
	mu      sync.Mutex
	acked   map[string]replication.Result
	refused map[string]error
	unknown map[string]error
}

func newLedger() *ledger {
	return &ledger{acked: map[string]replication.Result{}, refused: map[string]error{}, unknown: map[string]error{}}
}

// append appends data and records the outcome. It returns the error.
func (g *ledger) append(ctx context.Context, lg *replication.Log, l *owner.Lease, data string) error {
	res, err := lg.Append(ctx, l, []byte(data))
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case err == nil:
		g.acked[data] = res
	case errcode.CodeOf(err) == errcode.CodeAmbiguous:
		g.unknown[data] = err
	default:
		g.refused[data] = err
	}
	return err
}

// check reads the whole chain and verifies the promises (see verify).
func (g *ledger) check(t testing.TB, b bucket.Bucket) []replication.Record {
	t.Helper()
	recs, err := g.verify(b)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// verify reads the whole chain and checks: positions are 1..n without
// gaps, no record appears twice, every acknowledged record is there at the
// position it was acknowledged at, and no refused one is.
func (g *ledger) verify(b bucket.Bucket) ([]replication.Record, error) {
	recs, err := replication.Read(context.Background(), b, cell, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[string]bool{}
	for i, r := range recs {
		if r.Pos != replication.Pos(i+1) {
			return recs, fmt.Errorf("record %d has position %d", i, r.Pos)
		}
		d := string(r.Data)
		if seen[d] {
			return recs, fmt.Errorf("record %q read twice", d)
		}
		seen[d] = true
		if err, ok := g.refused[d]; ok {
			return recs, fmt.Errorf("refused record %q (%v) is in the log at %d", d, err, r.Pos)
		}
		if res, ok := g.acked[d]; ok && (res.Pos != r.Pos || res.Epoch != r.Epoch || res.TxID != r.TxID) {
			return recs, fmt.Errorf("record %q acknowledged as %+v, read as %+v", d, res, r)
		}
	}
	for d := range g.acked {
		if !seen[d] {
			return recs, fmt.Errorf("acknowledged record %q lost (read %q)", d, data(recs))
		}
	}
	return recs, nil
}

func data(recs []replication.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Data)
	}
	return out
}

func appendN(t testing.TB, g *ledger, lg *replication.Log, l *owner.Lease, prefix string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if err := g.append(context.Background(), lg, l, fmt.Sprintf("%s%d", prefix, i)); err != nil {
			t.Fatalf("append %s%d: %v", prefix, i, err)
		}
	}
}

// writeAndRelease has l's log append n records (prefix0, prefix1, …),
// close, so that it seals its chain end, and release the cell, so that
// the release record names that end.
func writeAndRelease(t testing.TB, b bucket.Bucket, g *ledger, l *owner.Lease, prefix string, n int) {
	t.Helper()
	lg := open(t, b, l)
	appendN(t, g, lg, l, prefix, n)
	if err := lg.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func isCode(err error, code errcode.Code) bool {
	var ce *errcode.Error
	return errors.As(err, &ce) && errcode.CodeOf(err) == code
}

var _ = fakes3.NewMem
