package daemon

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// logLists counts the LISTs of one cell's log.
type logLists struct {
	bucket.Bucket
	prefix string
	n      atomic.Int64
}

func (l *logLists) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	if strings.HasPrefix(in.Prefix, l.prefix) {
		l.n.Add(1)
	}
	return l.Bucket.List(ctx, in)
}

// TestNonHolderReadListsNoWholeLog: GET /v1/cells/c1/records on a daemon
// that does not hold the cell, at depths 0, 4,000 and 7,990 of a log of
// 8,000 one-record files (8 LIST pages), lists a few keys, never the
// whole log.
func TestNonHolderReadListsNoWholeLog(t *testing.T) {
	const files = 8000
	ctx := context.Background()
	m := fakes3.NewMem()
	n, err := owner.NewNode(m, owner.Config{Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := n.Claim(ctx, "c1", owner.ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lg, err := replication.Open(ctx, m, l)
	if err != nil {
		t.Fatal(err)
	}
	for i := range files {
		if _, err := lg.Append(ctx, l, fmt.Appendf(nil, "r%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := lg.Close(ctx); err != nil {
		t.Fatal(err)
	}
	lists := &logLists{Bucket: m, prefix: replication.LogPrefix("c1")}
	b := startTestDaemon(t, lists, "b", APIConfig{})
	for _, after := range []int{0, files / 2, files - 10} {
		before := lists.n.Load()
		st, res := b.call(t, "GET", fmt.Sprintf("/v1/cells/c1/records?after=%d&limit=10", after), "")
		recs, _ := res["records"].([]any)
		if st != 200 || len(recs) != 10 || recs[0].(map[string]any)["pos"] != float64(after+1) {
			t.Fatalf("read after %d: %d %v", after, st, res)
		}
		if got := lists.n.Load() - before; got > 4 {
			t.Errorf("read after %d: %d LISTs of the log; want at most 4 (a whole listing takes %d)", after, got, files/1000)
		}
	}
}
