package daemon

import (
	"fmt"
	"testing"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

// waitFor polls cond until it holds (10 s at most): a test's way to know a
// read is waiting before it appends.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// asyncRead sends a read in the background; its answer arrives on the channel.
func asyncRead(t *testing.T, url string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		// send's t.Fatal must not run off the test goroutine: errors
		// become a zero answer.
		defer func() { recover() }()
		ch <- send(t, "GET", url, "")
	}()
	return ch
}

func recordsOf(a answer) []any { rs, _ := a.body["records"].([]any); return rs }

// On the holder, a read with ?wait= that finds nothing waits, and the
// append that is acknowledged next answers it at once — long before its
// wait runs out — with that record; no record at all answers empty when
// the wait runs out.
func TestWaitingReadWakesOnAppend(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	if st, res := a.call(t, "POST", "/v1/cells/c/append", "one"); st != 200 {
		t.Fatalf("append: %d %v", st, res)
	}
	start := time.Now()
	got := asyncRead(t, a.srv.URL+"/v1/cells/c/records?after=1&wait=30s")
	waitFor(t, "the read to wait", func() bool { return a.d.waiting.Load() == 1 })
	// While it waits on the holder it reads nothing from the store: it
	// sleeps until the commit (a poll would read every unheldPoll).
	time.Sleep(50 * time.Millisecond) // its first read is done
	before := m.Counts()
	time.Sleep(3 * unheldPoll)
	if c := m.Counts().Sub(before); c.Get+c.Head > 0 { // the node lease renews and lists the fleet meanwhile
		t.Fatalf("a read waiting on the holder sent %+v to the store", c)
	}
	if st, res := a.call(t, "POST", "/v1/cells/c/append", "two"); st != 200 {
		t.Fatalf("append: %d %v", st, res)
	}
	r := <-got
	if rs := recordsOf(r); r.status != 200 || len(rs) != 1 || rs[0].(map[string]any)["pos"] != 2.0 {
		t.Fatalf("waiting read: %+v", r)
	}
	if el := time.Since(start); el > 15*time.Second {
		t.Fatalf("the waiting read answered after %v: not woken by the append", el)
	}
	st, res := a.call(t, "GET", "/v1/cells/c/records?after=2&wait=100ms", "")
	if st != 200 || len(res["records"].([]any)) != 0 || res["next_after"] != 2.0 {
		t.Fatalf("read after the tail: %d %v", st, res)
	}
	if n := a.d.waiting.Load(); n != 0 {
		t.Fatalf("%d reads still counted as waiting", n)
	}
}

// A node that does not hold the cell (no fleet to forward through) polls
// the bucket: a record appended on the holder answers its waiting read.
func TestWaitingReadOfCellHeldElsewhere(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	b := startTestDaemon(t, m.Client("b"), "b", APIConfig{})
	if st, res := a.call(t, "POST", "/v1/cells/c/append", "one"); st != 200 {
		t.Fatalf("append: %d %v", st, res)
	}
	got := asyncRead(t, b.srv.URL+"/v1/cells/c/records?after=1&wait=30s")
	waitFor(t, "the read to wait", func() bool { return b.d.waiting.Load() == 1 })
	if st, res := a.call(t, "POST", "/v1/cells/c/append", "two"); st != 200 {
		t.Fatalf("append: %d %v", st, res)
	}
	acked := time.Now()
	r := <-got
	if rs := recordsOf(r); r.status != 200 || len(rs) != 1 || r.hdr.Get(HeaderNode) != "b" {
		t.Fatalf("waiting read on b: %+v", r)
	}
	if el := time.Since(acked); el > 10*unheldPoll {
		t.Fatalf("b answered %v after the append: not polling every %v", el, unheldPoll)
	}
}

// Through a node of the fleet that does not hold the cell, a waiting read
// is forwarded to the holder, whose commit answers it.
func TestWaitingReadForwardedToHolder(t *testing.T) {
	m := fakes3.NewMem()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	b := startFleetNode(t, m.Client("b"), "b", testSecret, "", APIConfig{})
	hold(t, b, "c", "one")
	got := asyncRead(t, a.srv.URL+"/v1/cells/c/records?after=1&wait=30s")
	waitFor(t, "the read to wait on the holder", func() bool { return b.d.waiting.Load() == 1 })
	if got := send(t, "POST", b.srv.URL+"/v1/cells/c/append", "two"); got.status != 200 {
		t.Fatalf("append: %+v", got)
	}
	r := <-got
	if rs := recordsOf(r); r.status != 200 || len(rs) != 1 || r.hdr.Get(HeaderNode) != "b" || r.hdr.Get(headerForwardedBy) != "a" {
		t.Fatalf("waiting read through a: %+v", r)
	}
	if a.d.held("c") != nil {
		t.Fatal("a claimed the cell b holds")
	}
}

// Past --max-waiting-reads a waiting read is refused at once with
// DEED-E014 (503, Retry-After); reads without ?wait= are still served;
// a bad ?wait= is DEED-E040.
func TestWaitingReadsBounded(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{MaxWaitingReads: 1})
	if st, res := a.call(t, "POST", "/v1/cells/c/append", "one"); st != 200 {
		t.Fatalf("append: %d %v", st, res)
	}
	got := asyncRead(t, a.srv.URL+"/v1/cells/c/records?after=1&wait=30s")
	waitFor(t, "the read to wait", func() bool { return a.d.waiting.Load() == 1 })
	r := send(t, "GET", a.srv.URL+"/v1/cells/c/records?after=1&wait=1s", "")
	wantErr(t, r.status, r.body, 503, errcode.CodeBusy)
	if r.hdr.Get("Retry-After") == "" || r.body["applied"] != "no" {
		t.Fatalf("refusal: %+v", r)
	}
	if st, res := a.call(t, "GET", "/v1/cells/c/records", ""); st != 200 || len(res["records"].([]any)) != 1 {
		t.Fatalf("plain read while at the bound: %d %v", st, res)
	}
	for _, bad := range []string{"61s", "-1s", "soon", "1h"} {
		st, res := a.call(t, "GET", fmt.Sprintf("/v1/cells/c/records?wait=%s", bad), "")
		wantErr(t, st, res, 400, errcode.CodeBadRequest)
	}
	if st, res := a.call(t, "POST", "/v1/cells/c/append", "two"); st != 200 {
		t.Fatalf("append: %d %v", st, res)
	}
	<-got
}
