package fakes3_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
)

func has(m *fakes3.Mem, key, body string) bool {
	b, ok := m.Bytes(key)
	return ok && string(b) == body
}

func TestErrAfterWritesButIsAmbiguous(t *testing.T) {
	ctx := t.Context()
	m := fakes3.NewMem()
	m.Inject(fakes3.Rule{Op: fakes3.OpPut, Fault: fakes3.ErrAfter})

	etag, err := m.Put(ctx, "k", []byte("v1"), bucket.IfAbsent)
	if !errors.Is(err, bucket.ErrAmbiguous) || etag != "" {
		t.Fatalf("conditional put with a lost response: %q, %v; want ambiguous", etag, err)
	}
	if !has(m, "k", "v1") {
		t.Fatal("the write did not land")
	}
	// Reading the key back resolves the ambiguity, as the protocol does.
	o, err := m.Get(ctx, "k", 0)
	if err != nil || string(o.Body) != "v1" {
		t.Fatalf("get = %q, %v", o.Body, err)
	}
	if _, err := m.Put(ctx, "k", []byte("v2"), bucket.IfMatch(o.ETag)); !errors.Is(err, bucket.ErrAmbiguous) {
		t.Fatalf("if-match put with a lost response: %v, want ambiguous", err)
	}
	if !has(m, "k", "v2") {
		t.Fatal("the if-match write did not land")
	}
	// An unconditional write that loses its response is merely unavailable
	// (retrying it is harmless), and it landed too.
	if _, err := m.Put(ctx, "k", []byte("v3"), bucket.None); !errors.Is(err, bucket.ErrUnavailable) {
		t.Fatalf("plain put with a lost response: %v, want unavailable", err)
	}
	if !has(m, "k", "v3") {
		t.Fatal("the plain write did not land")
	}
	// A write whose condition fails is refused as usual: nothing applied,
	// so there is no response to lose.
	if _, err := m.Put(ctx, "k", []byte("v4"), bucket.IfAbsent); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("refused put: %v, want precondition", err)
	}

	m.ClearFaults()
	m.Inject(fakes3.Rule{Op: fakes3.OpDelete, Fault: fakes3.ErrAfter})
	o, _ = m.Get(ctx, "k", 0)
	if err := m.Delete(ctx, "k", bucket.IfMatch(o.ETag)); !errors.Is(err, bucket.ErrAmbiguous) {
		t.Fatalf("conditional delete with a lost response: %v, want ambiguous", err)
	}
	if _, ok := m.Bytes("k"); ok {
		t.Fatal("the delete did not apply")
	}
}

func TestErrBeforeDoesNotWrite(t *testing.T) {
	ctx := t.Context()
	m := fakes3.NewMem()
	m.Inject(fakes3.Rule{Op: fakes3.OpPut, Fault: fakes3.ErrBefore})
	// The caller cannot tell "before" from "after": still ambiguous.
	if _, err := m.Put(ctx, "k", []byte("v"), bucket.IfAbsent); !errors.Is(err, bucket.ErrAmbiguous) {
		t.Fatalf("put: %v, want ambiguous", err)
	}
	if _, ok := m.Bytes("k"); ok {
		t.Fatal("ErrBefore wrote the object")
	}
	if _, err := m.Put(ctx, "k", []byte("v"), bucket.None); !errors.Is(err, bucket.ErrUnavailable) {
		t.Fatalf("plain put: %v, want unavailable", err)
	}
	if _, ok := m.Bytes("k"); ok {
		t.Fatal("ErrBefore wrote the object")
	}
}

func TestConflictAndSlowDown(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		fault          fakes3.Fault
		condPut, plain error
	}{
		{fakes3.Conflict, bucket.ErrConflict, bucket.ErrConflict},
		{fakes3.SlowDown, bucket.ErrAmbiguous, bucket.ErrUnavailable},
	} {
		t.Run(tc.fault.String(), func(t *testing.T) {
			m := fakes3.NewMem()
			m.Set("existing", []byte("old"))
			m.Inject(fakes3.Rule{Fault: tc.fault})
			if _, err := m.Put(ctx, "k", []byte("v"), bucket.IfAbsent); !errors.Is(err, tc.condPut) {
				t.Errorf("conditional put: %v, want %v", err, tc.condPut)
			}
			if _, err := m.Put(ctx, "existing", []byte("new"), bucket.None); !errors.Is(err, tc.plain) {
				t.Errorf("plain put: %v, want %v", err, tc.plain)
			}
			if _, ok := m.Bytes("k"); ok || !has(m, "existing", "old") {
				t.Error("a refused write applied")
			}
			if _, err := m.Get(ctx, "existing", 0); err == nil {
				t.Error("get was not refused")
			}
		})
	}
}

func TestPartitionAffectsOnlyThatClient(t *testing.T) {
	ctx := t.Context()
	m := fakes3.NewMem()
	a, b := m.Client("a"), m.Client("b")
	m.Partition("a", true)

	if _, err := a.Put(ctx, "k", []byte("a"), bucket.IfAbsent); !errors.Is(err, bucket.ErrAmbiguous) {
		t.Fatalf("partitioned conditional put: %v, want ambiguous", err)
	}
	if _, err := a.Get(ctx, "k", 0); !errors.Is(err, bucket.ErrUnavailable) {
		t.Fatalf("partitioned get: %v, want unavailable", err)
	}
	if _, ok := m.Bytes("k"); ok {
		t.Fatal("a partitioned write applied")
	}
	if _, err := b.Put(ctx, "k", []byte("b"), bucket.IfAbsent); err != nil {
		t.Fatalf("client b: %v", err)
	}
	if _, err := m.Get(ctx, "k", 0); err != nil {
		t.Fatalf("the Mem itself (client \"\"): %v", err)
	}

	m.Partition("a", false)
	if o, err := a.Get(ctx, "k", 0); err != nil || string(o.Body) != "b" {
		t.Fatalf("healed client a: %q, %v", o.Body, err)
	}

	// Rules can single out a client too.
	m.Inject(fakes3.Rule{Client: "b", Fault: fakes3.ErrBefore})
	if _, err := a.Head(ctx, "k"); err != nil {
		t.Fatalf("client a hit b's rule: %v", err)
	}
	if _, err := b.Head(ctx, "k"); !errors.Is(err, bucket.ErrUnavailable) {
		t.Fatalf("client b: %v, want unavailable", err)
	}
	m.ClearFaults()
	m.Partition("b", true)
	m.ClearFaults() // heals partitions too
	if _, err := b.Head(ctx, "k"); err != nil {
		t.Fatalf("after ClearFaults: %v", err)
	}
}

func TestSkipTimesAndMatching(t *testing.T) {
	ctx := t.Context()
	m := fakes3.NewMem()
	m.Set("a/1", []byte("x"))
	m.Set("b/1", []byte("x"))
	remove := m.Inject(fakes3.Rule{Op: fakes3.OpGet, KeyPrefix: "a/", Fault: fakes3.ErrBefore, Skip: 2, Times: 3})

	var got []bool
	for range 7 {
		_, err := m.Get(ctx, "a/1", 0)
		got = append(got, err == nil)
		if _, err := m.Get(ctx, "b/1", 0); err != nil {
			t.Fatalf("other prefix: %v", err)
		}
		if _, err := m.Head(ctx, "a/1"); err != nil {
			t.Fatalf("other op: %v", err)
		}
	}
	want := []bool{true, true, false, false, false, true, true}
	if !slices.Equal(got, want) {
		t.Fatalf("successes %v, want %v (skip 2, then fail 3)", got, want)
	}

	remove()
	m.Inject(fakes3.Rule{Key: "b/1", Fault: fakes3.Conflict})
	m.Inject(fakes3.Rule{Match: func(op fakes3.Op, key string) bool { return op == fakes3.OpHead && key == "a/1" },
		Fault: fakes3.SlowDown})
	if _, err := m.Get(ctx, "a/1", 0); err != nil {
		t.Fatalf("removed rule still applies: %v", err)
	}
	if _, err := m.Get(ctx, "b/1", 0); !errors.Is(err, bucket.ErrConflict) {
		t.Fatalf("exact key rule: %v", err)
	}
	if _, err := m.Head(ctx, "a/1"); !errors.Is(err, bucket.ErrUnavailable) {
		t.Fatalf("match func rule: %v", err)
	}
	if _, err := m.Get(ctx, "a/1", 0); err != nil {
		t.Fatalf("match func rule hit a get: %v", err)
	}
}

// A Match function may look at the store (to fault a request only in some
// state) without deadlocking on the Mem's lock.
func TestMatchMayUseTheStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	m := fakes3.NewMem()
	m.Inject(fakes3.Rule{Op: fakes3.OpPut, Fault: fakes3.ErrBefore, Match: func(_ fakes3.Op, key string) bool {
		_, exists := m.Bytes(key)
		return exists && len(m.Keys("")) > 0
	}})
	done := make(chan error, 1)
	go func() {
		if _, err := m.Put(ctx, "k", []byte("1"), bucket.IfAbsent); err != nil {
			done <- err
			return
		}
		_, err := m.Put(ctx, "k", []byte("2"), bucket.None)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, bucket.ErrUnavailable) {
			t.Fatalf("second put: %v, want the rule to fire once the key exists", err)
		}
	case <-ctx.Done():
		t.Fatal("deadlock: a Match function that reads the store hangs the request")
	}
}

func TestLatencyIsVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		m.Inject(fakes3.Rule{Op: fakes3.OpPut, Latency: 3 * time.Second})
		m.Inject(fakes3.Rule{Op: fakes3.OpPut, Key: "slow", Latency: 2 * time.Second})

		start := time.Now()
		if _, err := m.Put(t.Context(), "k", []byte("v"), bucket.IfAbsent); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("put took %v of virtual time, want exactly 3s", d)
		}
		start = time.Now()
		if _, err := m.Put(t.Context(), "slow", []byte("v"), bucket.IfAbsent); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 5*time.Second {
			t.Fatalf("two matching rules took %v, want their sum, 5s", d)
		}
		start = time.Now()
		if _, err := m.Get(t.Context(), "k", 0); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("get took %v, want 0", d)
		}

		// A deadline shorter than the latency ends the request at the
		// deadline, unapplied; for a conditional write that is ambiguous.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start = time.Now()
		_, err := m.Put(ctx, "late", []byte("v"), bucket.IfAbsent)
		if !errors.Is(err, bucket.ErrAmbiguous) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("put past its deadline: %v", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Fatalf("put past its deadline took %v, want 1s", d)
		}
		if _, ok := m.Bytes("late"); ok {
			t.Fatal("a request that timed out in its latency applied")
		}
	})
}

func TestDropBlocksUntilDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		m.Inject(fakes3.Rule{Fault: fakes3.Drop})
		ctx, cancel := context.WithTimeout(t.Context(), 7*time.Second)
		defer cancel()
		start := time.Now()
		_, err := m.Put(ctx, "k", []byte("v"), bucket.IfAbsent)
		if d := time.Since(start); d != 7*time.Second {
			t.Fatalf("dropped put returned after %v, want at the 7s deadline", d)
		}
		if !errors.Is(err, bucket.ErrAmbiguous) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("dropped put: %v, want ambiguous deadline", err)
		}
		if _, ok := m.Bytes("k"); ok {
			t.Fatal("a dropped put applied")
		}

		// Cancellation ends it too, at the moment of the cancel.
		ctx, cancel = context.WithCancel(t.Context())
		go func() {
			time.Sleep(2 * time.Second)
			cancel()
		}()
		start = time.Now()
		if _, err := m.Get(ctx, "k", 0); !errors.Is(err, bucket.ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Fatalf("dropped get: %v", err)
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Fatalf("dropped get returned after %v, want 2s", d)
		}
	})
}

func TestCounts(t *testing.T) {
	ctx := t.Context()
	m := fakes3.NewMem()
	c := m.Client("n1")
	m.Set("planted", []byte("x")) // bypasses counters
	_, _ = m.Put(ctx, "a", []byte("1"), bucket.IfAbsent)
	_, _ = c.Put(ctx, "a", []byte("2"), bucket.IfAbsent) // refused, still counted
	_, _ = m.Put(ctx, "b", []byte("1"), bucket.None)
	before := m.Counts()
	_, _ = m.Get(ctx, "a", 0)
	_, _ = c.Get(ctx, "missing", 0)
	_, _ = m.Head(ctx, "a")
	_ = m.Delete(ctx, "b", bucket.None)
	_, _ = m.List(ctx, bucket.ListInput{})
	_, _ = m.List(ctx, bucket.ListInput{Prefix: "a"})
	m.Inject(fakes3.Rule{Fault: fakes3.ErrBefore})
	_, _ = m.Get(ctx, "a", 0) // failed, still counted
	_, _ = m.Bytes("a")
	_ = m.Keys("")

	got := m.Counts()
	want := fakes3.Counts{Get: 3, Head: 1, Put: 3, Delete: 1, List: 2}
	if got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
	if got.Total() != 10 {
		t.Fatalf("total %d, want 10", got.Total())
	}
	if d := got.Sub(before); d != (fakes3.Counts{Get: 3, Head: 1, Delete: 1, List: 2}) {
		t.Fatalf("sub %+v", d)
	}
}

func TestIgnoreConditions(t *testing.T) {
	ctx := t.Context()
	m := fakes3.NewMem()
	m.SetIgnoreConditions(true)
	e1, _ := m.Put(ctx, "k", []byte("1"), bucket.IfAbsent)
	if _, err := m.Put(ctx, "k", []byte("2"), bucket.IfAbsent); err != nil {
		t.Fatalf("broken store refused a create: %v", err)
	}
	if _, err := m.Put(ctx, "k", []byte("3"), bucket.IfMatch(e1)); err != nil {
		t.Fatalf("broken store refused a stale if-match: %v", err)
	}
	if err := m.Delete(ctx, "k", bucket.IfMatch(e1)); err != nil {
		t.Fatalf("broken store refused a stale delete: %v", err)
	}
	m.SetIgnoreConditions(false)
	if _, err := m.Put(ctx, "x", []byte("1"), bucket.IfMatch(e1)); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("conditions back on: %v", err)
	}
}

func TestMemListPagination(t *testing.T) {
	ctx := t.Context()
	m := fakes3.NewMem()
	keys := []string{
		"p/a/1", "p/a/2", "p/a/3", "p/b", "p/c/1", "p/c/2", "p/d", "p/e/1", "p/f", "q/1",
	}
	for _, k := range keys {
		m.Set(k, []byte(k))
	}
	type entry = string
	// Expected entries of a delimited listing of p/, in order: prefixes
	// end in "/", objects do not.
	wantAll := []entry{"p/a/", "p/b", "p/c/", "p/d", "p/e/", "p/f"}
	for max := 1; max <= len(wantAll)+1; max++ {
		in := bucket.ListInput{Prefix: "p/", Delimiter: "/", MaxKeys: max}
		var got []entry
		for pages := 0; ; pages++ {
			if pages > len(keys) {
				t.Fatalf("max %d: listing does not end", max)
			}
			page, err := m.List(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			// Merge objects and prefixes back into key order.
			var entries []entry
			for _, o := range page.Objects {
				entries = append(entries, o.Key)
			}
			entries = append(entries, page.Prefixes...)
			slices.Sort(entries)
			if len(entries) > max {
				t.Fatalf("max %d: page %q too long", max, entries)
			}
			if page.NextToken != "" && len(entries) != max {
				t.Fatalf("max %d: short page %q with a next token", max, entries)
			}
			got = append(got, entries...)
			if page.NextToken == "" {
				break
			}
			in.Token = page.NextToken
		}
		if !slices.Equal(got, wantAll) {
			t.Errorf("max %d: %q, want %q", max, got, wantAll)
		}
	}

	// StartAfter, and Token taking precedence over it.
	page, err := m.List(ctx, bucket.ListInput{Prefix: "p/", Delimiter: "/", StartAfter: "p/c/2"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(page.Prefixes, len(page.Objects)) != "[p/e/] 2" {
		t.Errorf("start-after: %+v", page)
	}
	page, err = m.List(ctx, bucket.ListInput{Prefix: "p/", StartAfter: "p/a/1", Token: "p/e/1"})
	if err != nil || len(page.Objects) != 1 || page.Objects[0].Key != "p/f" {
		t.Errorf("token over start-after: %+v, %v", page, err)
	}
	page, err = m.List(ctx, bucket.ListInput{})
	if err != nil || len(page.Objects) != len(keys) || page.Objects[0].ETag == "" {
		t.Errorf("flat list of everything: %+v, %v", page, err)
	}
}

func TestFaultString(t *testing.T) {
	for f, want := range map[fakes3.Fault]string{
		fakes3.NoFault: "none", fakes3.ErrAfter: "error-after", fakes3.Drop: "drop", fakes3.Fault(99): "fault(99)",
	} {
		if got := f.String(); got != want {
			t.Errorf("%d: %q, want %q", int(f), got, want)
		}
	}
}

// Match calls are serialised, so a Match function may keep state without
// locking even when the requests it sees run concurrently.
func TestMatchCallsAreSerialised(t *testing.T) {
	m := fakes3.NewMem()
	var seen []string // no lock: the race detector checks the guarantee
	m.Inject(fakes3.Rule{Match: func(_ fakes3.Op, key string) bool {
		seen = append(seen, key)
		return false
	}})
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { _, _ = m.Put(t.Context(), fmt.Sprint(i), nil, bucket.IfAbsent) })
	}
	wg.Wait()
	if len(seen) != 50 {
		t.Fatalf("Match saw %d requests, want 50", len(seen))
	}
}
