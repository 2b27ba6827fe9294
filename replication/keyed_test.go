package replication_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

func readAll(t *testing.T, m *fakes3.Mem) []replication.Record {
	t.Helper()
	recs, err := replication.Read(context.Background(), m, cell, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// A keyed append retried gets the first one's answer and writes nothing;
// the same key with another body is refused, applied no.
func TestAppendKeyedReplays(t *testing.T) {
	m := fakes3.NewMem()
	lease := claim(t, m, "a", false)
	lg := open(t, m, lease)
	ctx := context.Background()
	first, err := lg.AppendWith(ctx, lease, []byte("x"), replication.AppendOptions{Key: "k1"})
	if err != nil || first.Replayed || first.TS == 0 {
		t.Fatalf("first: %+v %v", first, err)
	}
	if _, err := lg.Append(ctx, lease, []byte("y")); err != nil {
		t.Fatal(err)
	}
	again, err := lg.AppendWith(ctx, lease, []byte("x"), replication.AppendOptions{Key: "k1"})
	if err != nil || !again.Replayed || again.Epoch != first.Epoch || again.TxID != first.TxID || again.Pos != first.Pos || again.TS != first.TS {
		t.Fatalf("replay: %+v %v, want %+v", again, err, first)
	}
	_, err = lg.AppendWith(ctx, lease, []byte("other"), replication.AppendOptions{Key: "k1"})
	mustCode(t, err, errcode.CodeKeyReused)
	if got := len(readAll(t, m)); got != 2 {
		t.Fatalf("log holds %d records, want 2", got)
	}
	_, err = lg.AppendWith(ctx, lease, []byte("x"), replication.AppendOptions{Key: "bad\nkey"})
	mustCode(t, err, errcode.CodeBadRequest)
}

// Duplicates in flight at once: one lands, every other answers its result.
func TestAppendKeyedInFlightWaits(t *testing.T) {
	m := fakes3.NewMem()
	lease := claim(t, m, "a", false)
	lg := open(t, m, lease)
	var wg sync.WaitGroup
	res := make([]replication.Result, 16)
	errs := make([]error, 16)
	for i := range res {
		wg.Go(func() {
			res[i], errs[i] = lg.AppendWith(context.Background(), lease, []byte("v"), replication.AppendOptions{Key: "same"})
		})
	}
	wg.Wait()
	fresh := 0
	for i := range res {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !res[i].Replayed {
			fresh++
		}
		if res[i].Pos != res[0].Pos || res[i].TxID != res[0].TxID {
			t.Fatalf("answer %d %+v differs from %+v", i, res[i], res[0])
		}
	}
	if fresh != 1 || len(readAll(t, m)) != 1 {
		t.Fatalf("%d fresh answers, %d records; want 1 and 1", fresh, len(readAll(t, m)))
	}
}

// A new owner — after a crash (no seal) or a clean handoff — answers the
// keys its predecessors wrote, group commits included, with their
// positions; its timestamps never go below theirs.
func TestAppendKeyedAcrossOwners(t *testing.T) {
	for _, clean := range []bool{false, true} {
		t.Run(fmt.Sprintf("clean=%v", clean), func(t *testing.T) {
			if err := keyedAcrossOwners(t, clean); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// keyedAcrossOwners is TestAppendKeyedAcrossOwners's check, returning what
// it finds wrong (the broken variants' tests expect it to find something).
func keyedAcrossOwners(t *testing.T, clean bool) error {
	m := fakes3.NewMem()
	ctx := context.Background()
	la := claim(t, m, "a", false)
	a, err := replication.Open(ctx, m, la)
	if err != nil {
		t.Fatal(err)
	}
	// Slow PUTs, so that appends queue up behind each other.
	stop := m.Inject(fakes3.Rule{Op: fakes3.OpPut, KeyPrefix: replication.LogPrefix(cell) + "e", Latency: 20 * time.Millisecond})
	firsts := map[string]replication.Result{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 40 { // concurrent: group commits carry several keys
		wg.Go(func() {
			k := fmt.Sprintf("k%d", i)
			r, err := a.AppendWith(ctx, la, []byte(k), replication.AppendOptions{Key: k})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			firsts[k] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	stop()
	shared := 0
	for _, r := range firsts {
		if r.Pos != r.FirstPos {
			shared++
		}
	}
	if shared == 0 {
		t.Fatal("no group commit carried two keyed appends")
	}
	if clean {
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
	} else {
		a.Abandon()
	}
	lb := claim(t, m, "b", true)
	b := open(t, m, lb)
	for k, f := range firsts {
		r, err := b.AppendWith(ctx, lb, []byte(k), replication.AppendOptions{Key: k})
		if err != nil || !r.Replayed || r.Pos != f.Pos || r.Epoch != f.Epoch || r.TxID != f.TxID || r.TS != f.TS {
			return fmt.Errorf("%s after a change of owner: %+v %v, want %+v", k, r, err, f)
		}
	}
	r, err := b.AppendWith(ctx, lb, []byte("new"), replication.AppendOptions{Key: "new"})
	if err != nil || r.Replayed {
		t.Fatal(r, err)
	}
	recs := readAll(t, m)
	if len(recs) != 41 {
		return fmt.Errorf("log holds %d records, want 41", len(recs))
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].TS < recs[i-1].TS || recs[i].TS == 0 {
			return fmt.Errorf("timestamps %d then %d at %d", recs[i-1].TS, recs[i].TS, recs[i].Pos)
		}
	}
	return nil
}

// A new owner whose clock is behind the last timestamp it fenced starts at
// that timestamp, not its clock.
func TestTimestampsNeverDecrease(t *testing.T) {
	m := fakes3.NewMem()
	ctx := context.Background()
	la := claim(t, m, "a", false)
	a := open(t, m, la)
	if _, err := a.Append(ctx, la, []byte("a")); err != nil {
		t.Fatal(err)
	}
	// A record from a clock far ahead, as the predecessor's next file.
	future := time.Now().Add(1000 * time.Hour).UnixMilli()
	h := a.Head()
	body, err := replication.Encode(&replication.File{Kind: replication.KindRecords, Epoch: la.Epoch(), TxID: h.Next, Token: la.Token(), Pos: h.NextPos, TS: future, Records: [][]byte{[]byte("ahead")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Put(ctx, replication.SlotKey(cell, la.Epoch(), h.Next), body, bucket.IfAbsent); err != nil {
		t.Fatal(err)
	}
	a.Abandon()
	lb := claim(t, m, "b", true)
	b := open(t, m, lb)
	r, err := b.Append(ctx, lb, []byte("b"))
	if err != nil || r.TS < future {
		t.Fatalf("new owner's timestamp %d, below the fenced %d (%v)", r.TS, future, err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The seal carries it too: a third owner, after the records are gone
	// from view, still starts at it.
	lc := claim(t, m, "c", true)
	c := open(t, m, lc)
	r2, err := c.Append(ctx, lc, []byte("c"))
	if err != nil || r2.TS < r.TS {
		t.Fatalf("third owner's timestamp %d below %d (%v)", r2.TS, r.TS, err)
	}
}

// match_pos: the append lands only at the position it names.
func TestAppendMatchPos(t *testing.T) {
	m := fakes3.NewMem()
	lease := claim(t, m, "a", false)
	lg := open(t, m, lease)
	ctx := context.Background()
	if r, err := lg.AppendWith(ctx, lease, []byte("a"), replication.AppendOptions{MatchPos: 1}); err != nil || r.Pos != 1 {
		t.Fatal(r, err)
	}
	_, err := lg.AppendWith(ctx, lease, []byte("b"), replication.AppendOptions{MatchPos: 1})
	mustCode(t, err, errcode.CodePosMismatch)
	var mm *replication.MismatchError
	if !errors.As(err, &mm) || mm.NextPos != 2 {
		t.Fatalf("mismatch %+v", mm)
	}
	// With a key, a replay answers its first outcome, not a mismatch.
	r1, err := lg.AppendWith(ctx, lease, []byte("c"), replication.AppendOptions{MatchPos: 2, Key: "c"})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := lg.AppendWith(ctx, lease, []byte("c"), replication.AppendOptions{MatchPos: 2, Key: "c"})
	if err != nil || !r2.Replayed || r2.Pos != r1.Pos {
		t.Fatal(r2, err)
	}
	if n := len(readAll(t, m)); n != 2 {
		t.Fatalf("%d records, want 2", n)
	}
}

// Conditional appends racing for one position: exactly one wins, each
// loser is told the position that is next, and nothing else is written.
func TestAppendMatchPosRace(t *testing.T) {
	if err := matchPosRace(t); err != nil {
		t.Fatal(err)
	}
}

func matchPosRace(t *testing.T) error {
	m := fakes3.NewMem()
	// Slow PUTs, so that the racers queue behind the first.
	m.Inject(fakes3.Rule{Op: fakes3.OpPut, KeyPrefix: replication.LogPrefix(cell) + "e", Latency: 10 * time.Millisecond})
	lease := claim(t, m, "a", false)
	lg := open(t, m, lease)
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := range 20 {
		wg.Go(func() {
			_, err := lg.AppendWith(context.Background(), lease, fmt.Appendf(nil, "%d", i), replication.AppendOptions{MatchPos: 1})
			mu.Lock()
			defer mu.Unlock()
			switch errcode.CodeOf(err) {
			case "":
				wins++
			case errcode.CodePosMismatch:
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if wins != 1 || len(readAll(t, m)) != 1 {
		return fmt.Errorf("%d wins, %d records; want 1 and 1", wins, len(readAll(t, m)))
	}
	return nil
}

// A batch is one transaction file at contiguous positions; a batch that
// cannot be one file is refused before anything is written.
func TestAppendBatch(t *testing.T) {
	m := fakes3.NewMem()
	lease := claim(t, m, "a", false)
	lg := open(t, m, lease)
	ctx := context.Background()
	if _, err := lg.Append(ctx, lease, []byte("first")); err != nil {
		t.Fatal(err)
	}
	r, err := lg.AppendBatch(ctx, lease, [][]byte{[]byte("a"), []byte("b"), []byte("c")}, replication.AppendOptions{Key: "b1", MatchPos: 2})
	if err != nil || r.FirstPos != 2 || r.LastPos != 4 {
		t.Fatalf("batch: %+v %v", r, err)
	}
	recs := readAll(t, m)
	if len(recs) != 4 || recs[1].TxID != recs[3].TxID || recs[1].TxID == recs[0].TxID {
		t.Fatalf("records %+v", recs)
	}
	_, err = lg.AppendBatch(ctx, lease, nil, replication.AppendOptions{})
	mustCode(t, err, errcode.CodeBadRequest)
	_, err = lg.AppendBatch(ctx, lease, make([][]byte, replication.MaxBatchRecords+1), replication.AppendOptions{})
	mustCode(t, err, errcode.CodeBadRequest)
	big := make([]byte, 5<<20)
	_, err = lg.AppendBatch(ctx, lease, [][]byte{big, big, big, big}, replication.AppendOptions{})
	mustCode(t, err, errcode.CodeBadRequest)
	if n := len(readAll(t, m)); n != 4 {
		t.Fatalf("%d records after refusals, want 4", n)
	}
	// Replayed as a whole; one record of it under the same key is another body.
	again, err := lg.AppendBatch(ctx, lease, [][]byte{[]byte("a"), []byte("b"), []byte("c")}, replication.AppendOptions{Key: "b1", MatchPos: 2})
	if err != nil || !again.Replayed || again.FirstPos != 2 || again.LastPos != 4 {
		t.Fatal(again, err)
	}
	_, err = lg.AppendWith(ctx, lease, []byte("a"), replication.AppendOptions{Key: "b1"})
	mustCode(t, err, errcode.CodeKeyReused)
}

// The window: a key out of it is forgotten by the owner that wrote it and,
// by the same definition, by the next one.
func TestKeyWindowLimit(t *testing.T) {
	m := fakes3.NewMem()
	ctx := context.Background()
	opt := replication.WithIdempotencyWindow(time.Hour, 3)
	la := claim(t, m, "a", false)
	a, err := replication.Open(ctx, m, la, opt)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := a.AppendWith(ctx, la, []byte("v"), replication.AppendOptions{Key: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := a.Keys(); n != 3 {
		t.Fatalf("owner keeps %d keys, want 3", n)
	}
	a.Abandon()
	lb := claim(t, m, "b", true)
	b := open(t, m, lb, opt)
	st, err := b.RebuildKeys(ctx)
	if err != nil || st.Keys != 3 || st.Lists != 1 || st.Gets != 3 {
		t.Fatalf("rebuild %+v %v: want 3 keys from 1 LIST and 3 GETs", st, err)
	}
	r, err := b.AppendWith(ctx, lb, []byte("v"), replication.AppendOptions{Key: "4"})
	if err != nil || !r.Replayed {
		t.Fatal(r, err)
	}
	r, err = b.AppendWith(ctx, lb, []byte("v"), replication.AppendOptions{Key: "0"})
	if err != nil || r.Replayed {
		t.Fatalf("a key out of the window: %+v %v, want appended again", r, err)
	}
}

// Keys in flight are forgotten once settled, whatever the outcome: the
// log keeps only the window.
func TestKeyedFlightIsDropped(t *testing.T) {
	m := fakes3.NewMem()
	lease := claim(t, m, "a", false)
	lg := open(t, m, lease)
	ctx := context.Background()
	for i := range 10 {
		if _, err := lg.AppendWith(ctx, lease, []byte("v"), replication.AppendOptions{Key: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := lg.AppendWith(ctx, lease, []byte("v"), replication.AppendOptions{Key: "m", MatchPos: 99})
	mustCode(t, err, errcode.CodePosMismatch)
	if n := replication.KeysInFlight(lg); n != 0 {
		t.Fatalf("%d keys still in flight", n)
	}
}

// The rebuild runs on its own: a keyed append that gives up waiting for it
// (refused, not written) does not stop it, so a window that takes longer
// to read than any one caller waits is still learnt.
func TestKeyRebuildOutlivesItsCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		ctx := context.Background()
		lb, b := keyedSuccessor(t, m, 200)
		var err error
		m.Inject(fakes3.Rule{Op: fakes3.OpGet, KeyPrefix: replication.LogPrefix(cell), Latency: 50 * time.Millisecond})
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		_, err = b.AppendWith(short, lb, []byte("v"), replication.AppendOptions{Key: "0"})
		if err == nil || mayHaveLanded(err) {
			t.Fatalf("an append that could not wait for the rebuild: %v, want refused unwritten", err)
		}
		time.Sleep(10 * time.Second) // nobody waits now
		synctest.Wait()
		if n := b.Keys(); n != 200 {
			t.Fatalf("the rebuild learnt %d keys on its own, want 200", n)
		}
		r, err := b.AppendWith(ctx, lb, []byte("v"), replication.AppendOptions{Key: "0"})
		if err != nil || !r.Replayed {
			t.Fatal(r, err)
		}
	})
}

// keyedSuccessor has a crash after n keyed appends (keys "0" to n-1)
// by owner a, then owner b's lease and log: one whose keyed appends need
// the rebuild of a's keys.
func keyedSuccessor(t *testing.T, m *fakes3.Mem, n int) (*owner.Lease, *replication.Log) {
	t.Helper()
	ctx := context.Background()
	la := claim(t, m, "a", false)
	a, err := replication.Open(ctx, m, la)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := a.AppendWith(ctx, la, []byte("v"), replication.AppendOptions{Key: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	a.Abandon()
	lb := claim(t, m, "b", true)
	return lb, open(t, m, lb)
}

// mayHaveLanded reports whether err says the append may have been written.
func mayHaveLanded(err error) bool { return errcode.CodeOf(err) == errcode.CodeAmbiguous }

// A key-window rebuild under way when its log ends (Close or Abandon) ends
// with it: the keyed append waiting for it is refused unwritten, and no
// goroutine of the rebuild outlives the log (synctest fails the test on
// one left blocked when the bubble ends).
func TestKeyRebuildEndsWithItsLog(t *testing.T) {
	for _, end := range []string{"close", "abandon"} {
		t.Run(end, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := fakes3.NewMem()
				ctx := context.Background()
				lb, b := keyedSuccessor(t, m, 20)
				var err error
				// The predecessor's record files answer never (until the
				// request's context ends): the rebuild cannot finish.
				m.Inject(fakes3.Rule{Op: fakes3.OpGet, KeyPrefix: replication.LogPrefix(cell), Fault: fakes3.Drop})
				errc := make(chan error, 1)
				go func() {
					_, err := b.AppendWith(ctx, lb, []byte("v"), replication.AppendOptions{Key: "0"})
					errc <- err
				}()
				time.Sleep(time.Second)
				synctest.Wait()
				if end == "close" {
					cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					defer cancel()
					_ = b.Close(cctx) // the seal may fail: the GETs are dropped
				} else {
					b.Abandon()
				}
				ended := time.Now()
				err = <-errc
				if err == nil || mayHaveLanded(err) {
					t.Fatalf("the append waiting for the rebuild: %v, want refused unwritten", err)
				}
				if d := time.Since(ended); d > time.Second {
					t.Fatalf("the append waiting for the rebuild was answered %v after the log ended (%v): the rebuild outlived its log", d, err)
				}
				gets := m.Counts().Get
				time.Sleep(time.Minute)
				if n := m.Counts().Get - gets; n != 0 {
					t.Fatalf("%d GETs a minute after the log ended: the rebuild outlived its log", n)
				}
			})
		})
	}
}

// A conditional append that names a position past the log's end is what a
// client sends when a newer owner answered it: a fenced owner proves its
// end current before it refuses, so that the retry of a record the newer
// owner wrote is sent on to it (DEED-E021), never answered as a mismatch
// naming an end the log has long passed; a current owner refuses it with
// the true end.
func TestConditionalPastTheEndProvesTheEnd(t *testing.T) {
	if err := pastTheEndOnAFencedOwner(t); err != nil {
		t.Fatal(err)
	}
}

func pastTheEndOnAFencedOwner(t *testing.T) error {
	m := fakes3.NewMem()
	ctx := context.Background()
	la := claim(t, m, "a", false)
	a := open(t, m, la)
	for _, r := range []string{"one", "two"} {
		if _, err := a.Append(ctx, la, []byte(r)); err != nil {
			t.Fatal(err)
		}
	}
	lb := claim(t, m, "b", true)
	b := open(t, m, lb)
	if _, err := b.Append(ctx, lb, []byte("three")); err != nil {
		t.Fatal(err)
	}
	first, err := b.AppendWith(ctx, lb, []byte("four"), replication.AppendOptions{Key: "k", MatchPos: 4})
	if err != nil || first.Pos != 4 {
		t.Fatalf("keyed append on b: %+v %v", first, err)
	}
	// The client lost b's answer and sends it again, to a, which has not
	// yet learnt it was fenced.
	_, err = a.AppendWith(ctx, la, []byte("four"), replication.AppendOptions{Key: "k", MatchPos: 4})
	if errcode.CodeOf(err) != errcode.CodeSuperseded {
		return fmt.Errorf("the fenced owner answered a retry of a record written past its end with %v, want %s", err, errcode.CodeSuperseded)
	}
	again, err := b.AppendWith(ctx, lb, []byte("four"), replication.AppendOptions{Key: "k", MatchPos: 4})
	if err != nil || !again.Replayed || again.Pos != first.Pos {
		t.Fatalf("the retry on the holder: %+v %v, want the replay of %+v", again, err, first)
	}
	_, err = b.AppendWith(ctx, lb, []byte("five"), replication.AppendOptions{MatchPos: 9})
	var mm *replication.MismatchError
	if !errors.As(err, &mm) || mm.NextPos != 5 {
		t.Fatalf("past the holder's end: %v, want a mismatch naming next position 5", err)
	}
	return nil
}

// A conditional append judged behind records taken before it, in a group
// commit that then fails because a newer owner fenced the log, is refused
// as the log is (DEED-E021), not with a mismatch against records that were
// never written: the newer owner may hold this very append at the position
// it names.
func TestConditionalBehindAFailedCommitIsNotAMismatch(t *testing.T) {
	if err := behindAFailedCommit(t); err != nil {
		t.Fatal(err)
	}
}

func behindAFailedCommit(t *testing.T) error {
	m := fakes3.NewMem()
	ctx := context.Background()
	ba := m.Client("a")
	la := claim(t, ba, "a", false)
	a := open(t, m.Client("a"), la)
	// a's first record lands, its answer is lost, and a's read-back is
	// slow: b claims, seals a's log behind that record and writes "four" at
	// position 2 meanwhile, and a queues two more appends behind the first.
	slot1 := replication.SlotKey(cell, 1, 1)
	m.Inject(fakes3.Rule{Op: fakes3.OpPut, Key: slot1, Client: "a", Fault: fakes3.ErrAfter, Times: 1})
	m.Inject(fakes3.Rule{Op: fakes3.OpGet, Key: slot1, Client: "a", Latency: 300 * time.Millisecond, Times: 1})
	first := make(chan error, 1)
	go func() { _, err := a.Append(ctx, la, []byte("one")); first <- err }()
	time.Sleep(50 * time.Millisecond)
	lb := claim(t, m.Client("b"), "b", true)
	b := open(t, m.Client("b"), lb)
	won, err := b.AppendWith(ctx, lb, []byte("four"), replication.AppendOptions{Key: "k", MatchPos: 2})
	if err != nil || won.Pos != 2 {
		t.Fatalf("b's conditional append: %+v %v", won, err)
	}
	second := make(chan error, 1)
	go func() { _, err := a.Append(ctx, la, []byte("two")); second <- err }()
	time.Sleep(50 * time.Millisecond)
	_, err = a.AppendWith(ctx, la, []byte("four"), replication.AppendOptions{Key: "k", MatchPos: 2})
	if err1 := <-first; err1 != nil {
		t.Fatalf("a's first append: %v", err1)
	}
	if err2 := <-second; errcode.CodeOf(err2) != errcode.CodeSuperseded {
		t.Fatalf("a's second append, into b's seal: %v, want %s", err2, errcode.CodeSuperseded)
	}
	if errcode.CodeOf(err) != errcode.CodeSuperseded {
		return fmt.Errorf("a refused the retry of a record b wrote at position 2 with %v, want %s", err, errcode.CodeSuperseded)
	}
	return nil
}
