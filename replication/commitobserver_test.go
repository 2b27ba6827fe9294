package replication_test

import (
	"context"
	"sync"
	"testing"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// WithCommitObserver sees each durable transaction file once, with its
// records and the PUTs it took: 1 on a healthy store, 2 when the first PUT
// failed before applying and was sent again.
func TestCommitObserverCountsRecordsAndPuts(t *testing.T) {
	m := fakes3.NewMem()
	l := claim(t, m, "a", false)
	var mu sync.Mutex
	type commit struct{ records, puts int }
	var got []commit
	lg := open(t, m, l, replication.WithCommitObserver(func(records, puts int) {
		mu.Lock()
		got = append(got, commit{records, puts})
		mu.Unlock()
	}))
	ctx := context.Background()
	if _, err := lg.Append(ctx, l, []byte("one")); err != nil {
		t.Fatal(err)
	}
	m.Inject(fakes3.Rule{Op: fakes3.OpPut, KeyPrefix: "cells/", Fault: fakes3.ErrBefore, Times: 1})
	if _, err := lg.Append(ctx, l, []byte("two")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != (commit{1, 1}) || got[1] != (commit{1, 2}) {
		t.Fatalf("commits observed: %+v, want [{1 1} {1 2}]", got)
	}
}
