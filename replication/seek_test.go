package replication_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// randomLog writes a log of many epochs on m: each epoch claims by force,
// and either only announces (and never writes), or writes some records —
// several at once, so that files carry one to three — and maybe a
// snapshot, then closes (a seal) or is abandoned (its successor seals it);
// GC runs now and then. It returns the position the next record gets.
func randomLog(t *testing.T, rng *rand.Rand, m *fakes3.Mem) replication.Pos {
	t.Helper()
	ctx := context.Background()
	var next replication.Pos = 1
	for e := range 3 + rng.IntN(10) {
		l := claim(t, m, fmt.Sprintf("n%d", e), true)
		if rng.IntN(6) == 0 {
			if err := replication.Announce(ctx, m, l); err != nil {
				t.Fatal(err)
			}
			continue
		}
		lg := open(t, m, l)
		for n := rng.IntN(25); n > 0; {
			k := min(n, 1+rng.IntN(3))
			var wg sync.WaitGroup
			for j := range k {
				wg.Go(func() {
					if _, err := lg.Append(ctx, l, fmt.Appendf(nil, "e%d-%d-%d", e, n, j)); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			n -= k
		}
		if t.Failed() {
			t.FailNow()
		}
		h := lg.Head()
		next = h.NextPos
		if rng.IntN(3) == 0 && h.Next > lg.Start().Next {
			if _, err := lg.Snapshot(ctx, l, h.Next-1-replication.TxID(rng.IntN(int(h.Next-lg.Start().Next))), []byte("state")); err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(2) == 0 {
			if err := lg.Close(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			lg.Abandon()
		}
		if rng.IntN(3) == 0 {
			if _, err := replication.GC(ctx, m, cell, replication.GCOptions{DropKeyWindow: rng.IntN(2) == 0}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return next
}

// outcome is what a read answered, in a comparable form.
type outcome struct {
	recs      []replication.Record
	code      errcode.Code
	compacted bool
}

func (o outcome) String() string {
	if o.code != "" {
		return fmt.Sprintf("%s (compacted %t)", o.code, o.compacted)
	}
	var ps []string
	for _, r := range o.recs {
		ps = append(ps, fmt.Sprintf("%d:e%d/%d:%s", r.Pos, r.Epoch, r.TxID, r.Data))
	}
	return fmt.Sprint(ps)
}

func readOutcome(b bucket.Bucket, after replication.Pos, limit int) outcome {
	recs, err := replication.Read(context.Background(), b, cell, after, limit)
	if err != nil {
		return outcome{code: errcode.CodeOf(err), compacted: errors.Is(err, replication.ErrCompacted)}
	}
	return outcome{recs: recs}
}

func sameOutcome(a, b outcome) bool {
	return a.code == b.code && a.compacted == b.compacted && slices.EqualFunc(a.recs, b.recs, func(x, y replication.Record) bool {
		return x.Pos == y.Pos && x.Epoch == y.Epoch && x.TxID == y.TxID && string(x.Data) == string(y.Data)
	})
}

// TestSeekReadEqualsWholeListing: on random logs of many epochs, with
// snapshots, epochs that never wrote, and prefixes GC deleted, a read that
// seeks (the first page listed holds 4 keys, so every log is "long")
// answers exactly as one that lists the whole log, at every position and
// for several limits, errors included.
func TestSeekReadEqualsWholeListing(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 22))
			m := fakes3.NewMem()
			next := randomLog(t, rng, m)
			sought := 0
			for after := replication.Pos(0); after <= next+1; after++ {
				for _, limit := range []int{1, 3, 0} {
					restore := replication.SetSeekPage(0)
					want := readOutcome(m, after, limit)
					restore()
					// 4: the first page holds announcement markers
					// only; 16 and 64: the files of an epoch or more,
					// so the read may list on instead (estimatePages).
					for _, page := range []int{4, 16, 64} {
						restore = replication.SetSeekPage(page)
						got := readOutcome(m, after, limit)
						restore()
						if !sameOutcome(got, want) {
							t.Fatalf("read after %d limit %d, first page %d:\nseek  %v\nwhole %v", after, limit, page, got, want)
						}
					}
					if want.code == "" {
						sought++
					}
				}
			}
			if sought == 0 {
				t.Fatal("no read returned records")
			}
		})
	}
}

// hooked runs fn once, before its at-th request (GET, HEAD or LIST).
type hooked struct {
	bucket.Bucket
	mu sync.Mutex
	n  int
	at int
	fn func()
}

func (h *hooked) tick() {
	h.mu.Lock()
	h.n++
	run := h.n == h.at
	h.mu.Unlock()
	if run {
		h.fn()
	}
}

func (h *hooked) Get(ctx context.Context, key string, max int64) (bucket.Object, error) {
	h.tick()
	return h.Bucket.Get(ctx, key, max)
}

func (h *hooked) Head(ctx context.Context, key string) (bucket.Info, error) {
	h.tick()
	return h.Bucket.Head(ctx, key)
}

func (h *hooked) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	h.tick()
	return h.Bucket.List(ctx, in)
}

// gcReady writes a log GC has work in: epoch 1 writes positions 1–20 and
// is sealed, epoch 2 writes 21–40, snapshots at txid (and position) 30 and
// closes. GC then deletes every record file of positions 1–30.
func gcReady(t *testing.T) *fakes3.Mem {
	t.Helper()
	ctx := context.Background()
	m := fakes3.NewMem()
	g := newLedger()
	for e := range 2 {
		l := claim(t, m, fmt.Sprintf("n%d", e), e > 0)
		lg := open(t, m, l)
		appendN(t, g, lg, l, fmt.Sprintf("e%d-", e), 20)
		if e == 1 {
			if _, err := lg.Snapshot(ctx, l, 30, []byte("state@30")); err != nil {
				t.Fatal(err)
			}
		}
		if err := lg.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// TestSeekReadRacingGC runs GC at every point of a seeking read — before
// each of its requests in turn, between the LISTs that find the epochs
// and the first files, between the GETs of the search, during the walk —
// and checks that the read answers what a whole listing answers either
// before GC or after it (the records, or ErrCompacted for positions GC
// deleted), or a retryable error: never records with a gap, never a log
// cut short.
func TestSeekReadRacingGC(t *testing.T) {
	defer replication.SetSeekPage(4)()
	ctx := context.Background()
	for _, after := range []replication.Pos{0, 10, 19, 20, 25, 29, 30, 35, 40} {
		for _, limit := range []int{3, 0} {
			m := gcReady(t)
			pre := readOutcome(m, after, limit)
			if _, err := replication.GC(ctx, m, cell, replication.GCOptions{DropKeyWindow: true}); err != nil {
				t.Fatal(err)
			}
			post := readOutcome(m, after, limit)
			if pre.code != "" || (after < 30 && !post.compacted) {
				t.Fatalf("after %d: before GC %v, after %v", after, pre, post)
			}
			for at := 1; ; at++ {
				m := gcReady(t)
				h := &hooked{Bucket: m, at: at, fn: func() {
					if _, err := replication.GC(ctx, m, cell, replication.GCOptions{DropKeyWindow: true}); err != nil {
						t.Error(err)
					}
				}}
				got := readOutcome(h, after, limit)
				if !sameOutcome(got, pre) && !sameOutcome(got, post) && got.code != errcode.CodeUnavailable {
					t.Fatalf("read after %d limit %d, GC before request %d: %v\nbefore GC %v\nafter GC  %v", after, limit, at, got, pre, post)
				}
				if h.n < at { // GC ran after the read's last request
					break
				}
			}
		}
	}
}

// TestSeekReadAboveAFileWrittenAgainAfterGC is the straggler of
// TestReadAboveAFileWrittenAgainAfterGC read by seeking: GC deleted slots
// 1–3 (a snapshot covers them), then a late PUT wrote slot 1 again. A
// seek starts there (it is the epoch's first file), and the walk meets
// the hole at slot 2 with its start present; only the snapshot above the
// hole tells that the chain ran past it.
func TestSeekReadAboveAFileWrittenAgainAfterGC(t *testing.T) {
	defer replication.SetSeekPage(1)()
	ctx := context.Background()
	m := fakes3.NewMem()
	la := claim(t, m, "a", false)
	logA := open(t, m, la)
	appendN(t, newLedger(), logA, la, "a", 4) // txids 1..4
	first := replication.SlotKey(cell, 1, 1)
	body, _ := m.Bytes(first)
	if _, err := logA.Snapshot(ctx, la, 3, []byte("state@3")); err != nil {
		t.Fatal(err)
	}
	if err := logA.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := replication.GC(ctx, m, cell, replication.GCOptions{DropKeyWindow: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Put(ctx, first, body, bucket.IfAbsent); err != nil {
		t.Fatal(err)
	}
	for _, after := range []replication.Pos{0, 1, 2} {
		recs, err := replication.Read(ctx, m, cell, after, 0)
		if !errors.Is(err, replication.ErrCompacted) {
			t.Fatalf("read after %d: %q, %v; want an error wrapping ErrCompacted", after, data(recs), err)
		}
	}
	recs, err := replication.Read(ctx, m, cell, 3, 0)
	if err != nil || !slices.Equal(data(recs), []string{"a3"}) {
		t.Fatalf("read after 3: %q %v", data(recs), err)
	}
}

// TestSeekReadRequests: a read of a few records lists about as far as it
// reads, whatever the depth: on a log of 2,500 one-record files (three
// LIST pages of 1,000 keys), one LIST page of the log, one of its epochs,
// one of the epoch's first keys, and at the log's end one of the keys
// past it; the search costs a GET (one record per file: the bound is
// exact), the walk one per record and its read-ahead. A read far past the
// end gallops down from the bound, then bisects: logarithmic in the
// distance.
func TestSeekReadRequests(t *testing.T) {
	const files = 2500
	ctx := context.Background()
	m := fakes3.NewMem()
	l := claim(t, m, "a", false)
	lg := open(t, m, l)
	for i := range files {
		if _, err := lg.Append(ctx, l, fmt.Appendf(nil, "r%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		after       replication.Pos
		n           int
		lists, gets int64
	}{
		{0, 10, 3, 25},
		{files / 2, 10, 3, 25},
		{files - 10, 10, 3, 25},
		{files - 5, 5, 4, 10}, // reads to the end: the check past it
		{files, 0, 4, 10},     // the tail of a follower: the bound, one below
		{files * 4, 0, 4, 40}, // far past the end: the search gallops down, then bisects
		{1 << 40, 0, 4, 60},
		{1<<64 - 2, 0, 4, 80}, // the largest position a record could have
		{1<<64 - 1, 0, 0, 0},  // no position follows: nothing read (it wrapped to 0: the whole chain walked)
	} {
		before := m.Counts()
		recs, err := replication.Read(ctx, m, cell, c.after, 10)
		used := m.Counts().Sub(before)
		if err != nil || len(recs) != c.n || (c.n > 0 && recs[0].Pos != c.after+1) {
			t.Fatalf("read after %d: %d records, %v", c.after, len(recs), err)
		}
		if used.List > c.lists || used.Get > c.gets {
			t.Errorf("read after %d: %v; want at most %d LISTs, %d GETs", c.after, used, c.lists, c.gets)
		}
		t.Logf("after %d: %v", c.after, used)
	}
}

// TestSeekHolderReadsEarlierEpochs: the holder's index covers only its
// own epoch; a read of an earlier epoch's positions seeks as well (a
// whole listing of these 5,000 files takes 5 LISTs).
func TestSeekHolderReadsEarlierEpochs(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	la := claim(t, m, "a", false)
	logA := open(t, m, la)
	g := newLedger()
	appendN(t, g, logA, la, "a", 5000)
	if err := logA.Close(ctx); err != nil {
		t.Fatal(err)
	}
	lb := claim(t, m, "b", true)
	logB := open(t, m, lb)
	appendN(t, g, logB, lb, "b", 5)
	for _, after := range []replication.Pos{0, 2500, 4998} {
		before := m.Counts()
		recs, err := logB.Read(ctx, after, 4, false)
		used := m.Counts().Sub(before)
		if err != nil || len(recs) != 4 || recs[0].Pos != after+1 {
			t.Fatalf("read after %d: %d records, %v", after, len(recs), err)
		}
		if used.List > 4 { // a page of the log, its epochs, two epochs' first keys
			t.Errorf("read after %d: %v; want at most 4 LISTs", after, used)
		}
	}
	all := g.check(t, m)
	recs, err := logB.Read(ctx, 4998, 0, false)
	if err != nil || !slices.Equal(data(recs), data(all[4998:])) {
		t.Fatalf("read after 4998: %q %v", data(recs), err)
	}
}

// TestSeekReadCompacted: a read of positions GC deleted from a long log
// answers ErrCompacted from the snapshot just below the first file left,
// without listing the log whole (6,000 files, 5,000 left after GC: a
// whole listing takes 6 LISTs).
func TestSeekReadCompacted(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	l := claim(t, m, "a", false)
	lg := open(t, m, l)
	for i := range 6000 {
		if _, err := lg.Append(ctx, l, fmt.Appendf(nil, "r%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lg.Snapshot(ctx, l, 1000, []byte("state@1000")); err != nil {
		t.Fatal(err)
	}
	if err := lg.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := replication.GC(ctx, m, cell, replication.GCOptions{DropKeyWindow: true}); err != nil {
		t.Fatal(err)
	}
	for _, after := range []replication.Pos{0, 500, 999} {
		before := m.Counts()
		recs, err := replication.Read(ctx, m, cell, after, 10)
		used := m.Counts().Sub(before)
		if !errors.Is(err, replication.ErrCompacted) {
			t.Fatalf("read after %d: %q, %v; want ErrCompacted", after, data(recs), err)
		}
		if used.List > 4 {
			t.Errorf("read after %d: %v; want at most 4 LISTs", after, used)
		}
	}
	recs, err := replication.Read(ctx, m, cell, 1000, 2)
	if err != nil || !slices.Equal(data(recs), []string{"r1000", "r1001"}) {
		t.Fatalf("read after 1000: %q %v", data(recs), err)
	}
}

// TestSeekTailReadRacingWrites: a follower's read at the end of the log,
// with the holder appending and snapshotting past that end before each of
// the read's requests in turn. The snapshot above the end the walk met
// looks like GC's hole, so the read starts again from a whole listing;
// the answer is the log before the writes or after them, never an error.
func TestSeekTailReadRacingWrites(t *testing.T) {
	defer replication.SetSeekPage(4)()
	ctx := context.Background()
	for at := 1; ; at++ {
		m := fakes3.NewMem()
		l := claim(t, m, "a", false)
		lg := open(t, m, l)
		g := newLedger()
		appendN(t, g, lg, l, "a", 20)
		h := &hooked{Bucket: m, at: at, fn: func() {
			appendN(t, g, lg, l, "b", 2)
			if _, err := lg.Snapshot(ctx, l, lg.Head().Next-1, []byte("state")); err != nil {
				t.Error(err)
			}
		}}
		recs, err := replication.Read(ctx, h, cell, 20, 0)
		if err != nil || (len(recs) != 0 && !slices.Equal(data(recs), []string{"b0", "b1"})) {
			t.Fatalf("writes before request %d: %q, %v", at, data(recs), err)
		}
		if h.n < at {
			break
		}
	}
}
