package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/replication"
)

// sseEvent is one event of a stream as a client sees it: a record
// (id, data), an "error" event, or a comment (a heartbeat).
type sseEvent struct {
	id, event, data, comment string
}

// sseStream is an open event stream; its events arrive on ch, which is
// closed when the stream ends.
type sseStream struct {
	resp *http.Response
	ch   chan sseEvent
}

// openStream opens GET url with Accept: text/event-stream and hdr (name,
// value pairs) and starts reading its events; a non-200 answer is
// returned with a nil stream.
func openStream(t testing.TB, url string, hdr ...string) (*sseStream, answer) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		defer resp.Body.Close()
		a := answer{status: resp.StatusCode, hdr: resp.Header}
		if err := json.NewDecoder(resp.Body).Decode(&a.body); err != nil {
			t.Fatalf("answer %d is not JSON: %v", resp.StatusCode, err)
		}
		return nil, a
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("stream answered Content-Type %q", ct)
	}
	s := &sseStream{resp: resp, ch: make(chan sseEvent, 1024)}
	t.Cleanup(func() { resp.Body.Close() })
	go func() {
		defer close(s.ch)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev != (sseEvent{}) {
					s.ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				ev.comment = strings.TrimSpace(line[1:])
			default:
				k, v, _ := strings.Cut(line, ":")
				v = strings.TrimPrefix(v, " ")
				switch k {
				case "id":
					ev.id = v
				case "event":
					ev.event = v
				case "data":
					ev.data = v
				}
			}
		}
	}()
	return s, answer{status: 200, hdr: resp.Header}
}

// next is the stream's next event that is not a comment (or the retry
// field), within 20 s.
func (s *sseStream) next(t testing.TB) sseEvent {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-s.ch:
			if !ok {
				t.Fatal("the stream ended")
			}
			if ev.id == "" && ev.event == "" && ev.data == "" {
				continue
			}
			return ev
		case <-timeout:
			t.Fatal("no event within 20 s")
		}
	}
}

// record is the next event as a record: its position and data.
func (s *sseStream) record(t testing.TB) client.Record {
	t.Helper()
	ev := s.next(t)
	var rec client.Record
	if ev.event != "" || json.Unmarshal([]byte(ev.data), &rec) != nil {
		t.Fatalf("event %+v is not a record", ev)
	}
	if ev.id != strconv.FormatUint(rec.Pos, 10) {
		t.Fatalf("event id %q for the record at %d", ev.id, rec.Pos)
	}
	return rec
}

// expectRecords reads n record events and requires positions from+1 on,
// in order: none twice, none skipped.
func (s *sseStream) expectRecords(t *testing.T, from uint64, data ...string) {
	t.Helper()
	for i, want := range data {
		rec := s.record(t)
		if rec.Pos != from+uint64(i)+1 || string(rec.Data) != want {
			t.Fatalf("event %d: record %d %q, want %d %q", i, rec.Pos, rec.Data, from+uint64(i)+1, want)
		}
	}
}

// appendOK appends rec to cell through url, again while the answer is a
// refusal that wrote nothing and says to retry (a fleet whose view of a
// node that just left is not yet fresh), for 10 s at most.
func appendOK(t *testing.T, url, cell, rec string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := send(t, "POST", url+"/v1/cells/"+cell+"/append", rec)
		if got.status == 200 {
			return
		}
		if got.body["applied"] != "no" || !streamRetryable(errcode.Code(got.code())) || time.Now().After(deadline) {
			t.Fatalf("append %q: %+v", rec, got)
		}
	}
}

// On the holder a stream sends every record after ?after= (one event
// each, id the position, data the record exactly as the records endpoint
// answers it), then each record as it is committed.
func TestEventStreamOnHolder(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	for _, r := range []string{"one", "two", "three"} {
		appendOK(t, a.srv.URL, "c", r)
	}
	s, _ := openStream(t, a.srv.URL+"/v1/cells/c/records?after=1&follow=true")
	if s.resp.Header.Get("Cache-Control") != "no-cache" || s.resp.Header.Get(HeaderNode) != "a" {
		t.Fatalf("stream headers: %v", s.resp.Header)
	}
	ev := s.next(t)
	read := send(t, "GET", a.srv.URL+"/v1/cells/c/records?after=1&limit=1", "")
	want, _ := json.Marshal(read.body["records"].([]any)[0])
	var got, wantMap map[string]any
	_ = json.Unmarshal([]byte(ev.data), &got)
	_ = json.Unmarshal(want, &wantMap)
	if ev.id != "2" || fmt.Sprint(got) != fmt.Sprint(wantMap) {
		t.Fatalf("first event %+v, want id 2 and data %s", ev, want)
	}
	s.expectRecords(t, 2, "three")
	appendOK(t, a.srv.URL, "c", "four")
	s.expectRecords(t, 3, "four")
	if n := a.d.followers.Load(); n != 1 {
		t.Fatalf("%d streams counted, want 1", n)
	}
}

// A stream resumes after Last-Event-ID (an EventSource's reconnection),
// which wins over ?after=.
func TestEventStreamResumesAfterLastEventID(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	for _, r := range []string{"one", "two", "three"} {
		appendOK(t, a.srv.URL, "c", r)
	}
	s, _ := openStream(t, a.srv.URL+"/v1/cells/c/records?after=0&follow=true", "Last-Event-ID", "2")
	s.expectRecords(t, 2, "three")
}

// A silent stream sends a heartbeat comment every heartbeat.
func TestEventStreamHeartbeat(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	a.d.sseHeartbeat = 50 * time.Millisecond
	appendOK(t, a.srv.URL, "c", "one")
	s, _ := openStream(t, a.srv.URL+"/v1/cells/c/records?after=1&follow=true")
	beats := 0
	for timeout := time.After(10 * time.Second); beats < 3; {
		select {
		case ev := <-s.ch:
			if ev.id != "" || ev.event != "" {
				t.Fatalf("event %+v on a log that did not grow", ev)
			}
			if ev.comment == "heartbeat" {
				beats++
			}
		case <-timeout:
			t.Fatalf("%d heartbeats in 10 s at one per 50 ms", beats)
		}
	}
}

// What a stream cannot serve is refused before it starts, as any read's
// refusal: no Accept: text/event-stream (406), ?wait= or ?barrier= with
// follow, a Last-Event-ID that is no position (DEED-E040); past
// --max-followers, DEED-E014 (503, Retry-After, applied "no").
func TestEventStreamRefusals(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{MaxFollowers: 1})
	appendOK(t, a.srv.URL, "c", "one")
	r := send(t, "GET", a.srv.URL+"/v1/cells/c/records?follow=true", "")
	wantErr(t, r.status, r.body, http.StatusNotAcceptable, errcode.CodeBadRequest)
	for _, q := range []string{"follow=true&wait=1s", "follow=true&barrier=true", "follow=maybe"} {
		_, r := openStream(t, a.srv.URL+"/v1/cells/c/records?"+q)
		wantErr(t, r.status, r.body, 400, errcode.CodeBadRequest)
	}
	_, r = openStream(t, a.srv.URL+"/v1/cells/c/records?follow=true", "Last-Event-ID", "two")
	wantErr(t, r.status, r.body, 400, errcode.CodeBadRequest)

	s, _ := openStream(t, a.srv.URL+"/v1/cells/c/records?follow=true")
	s.expectRecords(t, 0, "one")
	_, r = openStream(t, a.srv.URL+"/v1/cells/c/records?follow=true")
	wantErr(t, r.status, r.body, 503, errcode.CodeBusy)
	if r.hdr.Get("Retry-After") == "" || r.body["applied"] != "no" {
		t.Fatalf("refusal past the bound: %+v", r)
	}
	// A waiting read is bounded apart: a stream does not count against it.
	if got := send(t, "GET", a.srv.URL+"/v1/cells/c/records?after=1&wait=10ms", ""); got.status != 200 {
		t.Fatalf("waiting read while a stream runs: %+v", got)
	}
	s.resp.Body.Close()
	waitFor(t, "the stream's end to be counted", func() bool { return a.d.followers.Load() == 0 })
	s, _ = openStream(t, a.srv.URL+"/v1/cells/c/records?follow=true")
	s.expectRecords(t, 0, "one")
}

// A failure no retry mends ends the stream with an event "error" carrying
// the DEED error body, after every record before it: here a damaged
// transaction file (DEED-E031) read from the bucket by a node that does
// not hold the cell.
func TestEventStreamEndsWithErrorEvent(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	b := startTestDaemon(t, m.Client("b"), "b", APIConfig{})
	for _, r := range []string{"one", "two", "three"} {
		appendOK(t, a.srv.URL, "c", r)
	}
	key := replication.SlotKey("c", 1, 3)
	body, ok := m.Bytes(key)
	if !ok {
		t.Fatalf("%s missing", key)
	}
	body[len(body)/2] ^= 0x10
	m.Set(key, body)
	s, _ := openStream(t, b.srv.URL+"/v1/cells/c/records?follow=true&limit=2")
	s.expectRecords(t, 0, "one", "two")
	ev := s.next(t)
	var e client.ErrorBody
	if ev.event != "error" || json.Unmarshal([]byte(ev.data), &e) != nil || e.Code != errcode.CodeCorruptTx || !strings.HasPrefix(e.Error, string(errcode.CodeCorruptTx)) {
		t.Fatalf("last event %+v, want an error event with %s", ev, errcode.CodeCorruptTx)
	}
	if _, open := <-s.ch; open {
		t.Fatal("the stream went on after its error event")
	}
}

// A node that shuts down ends its streams, each with an event "error"
// DEED-E011 (reconnect elsewhere), instead of holding the shutdown.
func TestEventStreamEndsOnShutdown(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	appendOK(t, a.srv.URL, "c", "one")
	s, _ := openStream(t, a.srv.URL+"/v1/cells/c/records?after=1&follow=true")
	waitFor(t, "the stream to run", func() bool { return a.d.followers.Load() == 1 })
	a.d.EndStreams()
	ev := s.next(t)
	if ev.event != "error" || !strings.Contains(ev.data, string(errcode.CodeUnavailable)) {
		t.Fatalf("last event %+v, want an error event with %s", ev, errcode.CodeUnavailable)
	}
}

// A stream through a node that does not hold the cell follows it while
// the holder moves it away, the cell comes back, and its holder drains
// and leaves: every record appended meanwhile arrives once, in order.
func TestEventStreamThroughPeerSurvivesMoves(t *testing.T) {
	m := fakes3.NewMem()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	b := startFleetNode(t, m.Client("b"), "b", testSecret, "", APIConfig{})
	c := startFleetNode(t, m.Client("c"), "c", testSecret, "", APIConfig{})
	waitFor(t, "every node to trust the others", func() bool {
		for _, n := range []*fleetNode{a, b, c} {
			if len(n.d.others()) != 2 {
				return false
			}
		}
		return true
	})
	hold(t, b, "x", "r1")
	s, _ := openStream(t, a.srv.URL+"/v1/cells/x/records?follow=true")
	s.expectRecords(t, 0, "r1")
	waitFor(t, "the stream's read to wait on the holder", func() bool { return b.d.waiting.Load() == 1 })
	appendOK(t, a.srv.URL, "x", "r2")
	s.expectRecords(t, 1, "r2")

	if got := send(t, "POST", b.srv.URL+"/v1/cells/x/move?to=c", ""); got.status != 200 {
		t.Fatalf("move to c: %+v", got)
	}
	appendOK(t, a.srv.URL, "x", "r3")
	appendOK(t, c.srv.URL, "x", "r4")
	s.expectRecords(t, 2, "r3", "r4")

	if got := send(t, "POST", c.srv.URL+"/v1/node/drain", ""); got.status/100 != 2 {
		t.Fatalf("drain c: %+v", got)
	}
	waitFor(t, "c to hand x off", func() bool { return c.d.held("x") == nil })
	appendOK(t, a.srv.URL, "x", "r5")
	s.expectRecords(t, 4, "r5")
	// b leaves as `deed run` does on SIGTERM: it says draining and hands x
	// off while it still answers, so that no peer routes to it when its
	// listener closes (a forward on a connection the listener then closes
	// is rightly answered "unknown").
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := b.d.Leave(ctx); err != nil {
		t.Fatalf("b leaves: %v", err)
	}
	b.srv.Close()
	closeOK(t, b.d)
	appendOK(t, a.srv.URL, "x", "r6")
	appendOK(t, a.srv.URL, "x", "r7")
	s.expectRecords(t, 5, "r6", "r7")
	select {
	case ev := <-s.ch:
		if ev.id != "" || ev.event != "" {
			t.Fatalf("an event past the last record: %+v", ev)
		}
	case <-time.After(200 * time.Millisecond):
	}
}

// A read waiting on the holder's log answers empty as soon as that log
// ends here (the cell released, moved or drained away), so that its
// reader (a stream's loop, a forwarding node) asks again where the cell is
// now, instead of the old holder polling the bucket until the wait runs out.
func TestWaitingReadAnswersWhenTheCellLeaves(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	appendOK(t, a.srv.URL, "c", "one")
	got := asyncRead(t, a.srv.URL+"/v1/cells/c/records?after=1&wait=30s")
	waitFor(t, "the read to wait", func() bool { return a.d.waiting.Load() == 1 })
	time.Sleep(50 * time.Millisecond) // it sleeps on the log by now
	if st, res := a.call(t, "POST", "/v1/cells/c/release", ""); st != 200 {
		t.Fatalf("release: %d %v", st, res)
	}
	select {
	case r := <-got:
		if r.status != 200 || len(recordsOf(r)) != 0 {
			t.Fatalf("waiting read: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting read went on waiting after its cell left the node")
	}
}

// A waiting read forwarded to a node that no longer holds the cell (the
// hint of an earlier forward) is served there from the bucket, and marked
// so: the next one goes to the cell's holder, whose commit wakes it.
func TestWaitingReadForwardedPastAStaleHolder(t *testing.T) {
	m := fakes3.NewMem()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	b := startFleetNode(t, m.Client("b"), "b", testSecret, "", APIConfig{})
	c := startFleetNode(t, m.Client("c"), "c", testSecret, "", APIConfig{})
	waitFor(t, "every node to trust the others", func() bool {
		return len(a.d.others()) == 2 && len(b.d.others()) == 2 && len(c.d.others()) == 2
	})
	hold(t, b, "x", "r1")
	if got := send(t, "GET", a.srv.URL+"/v1/cells/x/records?after=0&wait=1s", ""); got.status != 200 || got.hdr.Get(HeaderNode) != "b" {
		t.Fatalf("read through a: %+v", got) // a's hint: b
	}
	if got := send(t, "POST", b.srv.URL+"/v1/cells/x/move?to=c", ""); got.status != 200 {
		t.Fatalf("move to c: %+v", got)
	}
	waitFor(t, "c to hold x", func() bool { return c.d.held("x") != nil && b.d.held("x") == nil })
	// The first read after the move may reach b (a's hint), which serves
	// it from the bucket and says so; the next one waits on c.
	for range 2 {
		got := asyncRead(t, a.srv.URL+"/v1/cells/x/records?after=1&wait=200ms")
		<-got
	}
	got := asyncRead(t, a.srv.URL+"/v1/cells/x/records?after=1&wait=30s")
	waitFor(t, "the read to wait on c, the holder", func() bool { return c.d.waiting.Load() == 1 })
	if n := b.d.waiting.Load(); n != 0 {
		t.Fatalf("%d reads wait on b, which no longer holds x", n)
	}
	appendOK(t, c.srv.URL, "x", "r2")
	if r := <-got; r.status != 200 || len(recordsOf(r)) != 1 {
		t.Fatalf("waiting read: %+v", r)
	}
}

// A stream that starts (or resumes, by Last-Event-ID) below the trim point
// ends at once with an event "error" DEED-E046 that names the first
// position still served, as a read there answers 410 with first_pos: the
// follower restores from the snapshot and resumes after it.
func TestEventStreamBelowTheTrimPoint(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	for _, r := range []string{"one", "two", "three", "four"} {
		appendOK(t, a.srv.URL, "c", r)
	}
	if st, res := a.call(t, "PUT", "/v1/cells/c/snapshot?upto=3", "s3"); st != 200 {
		t.Fatalf("snapshot: %d %v", st, res)
	}
	if st, res := a.call(t, "POST", "/v1/cells/c/trim?before=4", ""); st != 200 {
		t.Fatalf("trim: %d %v", st, res)
	}
	s, ans := openStream(t, a.srv.URL+"/v1/cells/c/records?follow=true", "Last-Event-ID", "1")
	if s == nil {
		t.Fatalf("stream below the trim point answered %+v, want a stream", ans)
	}
	ev := s.next(t)
	var e client.ErrorBody
	if ev.event != "error" || json.Unmarshal([]byte(ev.data), &e) != nil || e.Code != errcode.CodeTrimmed || e.FirstPos == nil || *e.FirstPos != 4 || e.Applied != "no" {
		t.Fatalf("first event %+v, want an error event with %s, first_pos 4, applied no", ev, errcode.CodeTrimmed)
	}
	if _, open := <-s.ch; open {
		t.Fatal("the stream went on after its error event")
	}
	s, _ = openStream(t, a.srv.URL+"/v1/cells/c/records?follow=true", "Last-Event-ID", "3")
	s.expectRecords(t, 3, "four")
}
