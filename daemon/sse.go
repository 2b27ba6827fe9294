package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/replication"
)

// Following a log as Server-Sent Events: GET …/records?follow=true with
// Accept: text/event-stream streams every record after ?after= (or after
// Last-Event-ID) as one event, then every record committed later.
//
// The stream is kept by the node the client connected to, which reads the
// log in a loop of routed waiting reads: forwarded to the holder within a
// fleet (whose commit wakes it), on its own log when it holds the cell,
// from the bucket otherwise. A move, a drain or a dead holder is then only
// a read that fails or answers empty and is sent again, routed anew, from
// the position of the last event sent: the client sees each record once,
// in order, whichever node holds the cell meanwhile.

const (
	// DefaultMaxFollowers bounds the event streams a node serves at once:
	// each holds its connection and its handler's goroutine, no more than
	// a waiting read does (BenchmarkSSEFollowersMemory: about 33 KB of
	// heap per stream, both ends of its connection counted).
	DefaultMaxFollowers = 4096
	// sseHeartbeat is how long a stream may stay silent: a comment line
	// then tells the client (and any proxy) that it is alive. Each read
	// of the loop waits at most this long.
	sseHeartbeat = 15 * time.Second
	// sseRetryMin and sseRetryMax bound the pause of the loop after a read
	// that failed in a way a retry can mend.
	sseRetryMin = 100 * time.Millisecond
	sseRetryMax = 5 * time.Second
	// sseReconnect is the reconnection delay the stream asks of an
	// EventSource (its "retry:" field).
	sseReconnect = time.Second
)

// wantsEventStream reports whether r asks for Server-Sent Events.
func wantsEventStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
}

// lastEventID reads the Last-Event-ID header an EventSource sends when it
// reconnects: the position of the last event it received, which the
// stream resumes after (it overrides ?after=).
func lastEventID(r *http.Request) (replication.Pos, bool, error) {
	s := strings.TrimSpace(r.Header.Get("Last-Event-ID"))
	if s == "" {
		return 0, false, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, errcode.Errorf(errcode.CodeBadRequest, "Last-Event-ID %q: want a position (the id of the last event received)", s)
	}
	return replication.Pos(v), true, nil
}

// startStream is GET …/records?follow=true: it checks what a stream
// needs (Accept: text/event-stream, no ?wait= or ?barrier=, a
// Last-Event-ID that is a position), counts it against maxStreams, and streams.
// Each refusal is answered as any read's, before the stream begins.
func (d *Daemon) startStream(w http.ResponseWriter, r *http.Request, name string, after replication.Pos, limit int, waitOrBarrier bool, maxStreams int) {
	if !wantsEventStream(r) {
		writeErrorStatus(w, http.StatusNotAcceptable, errcode.Errorf(errcode.CodeBadRequest, "follow %s: ?follow=true answers Server-Sent Events: send Accept: text/event-stream (or read with ?wait= to long-poll)", name))
		return
	}
	if waitOrBarrier {
		writeError(w, errcode.Errorf(errcode.CodeBadRequest, "follow %s: ?follow=true takes no ?wait= or ?barrier= (the stream waits by itself)", name))
		return
	}
	if id, ok, err := lastEventID(r); err != nil {
		writeError(w, err)
		return
	} else if ok {
		after = id
	}
	if n := d.followers.Add(1); n > int64(maxStreams) {
		d.followers.Add(-1)
		w.Header().Set("Retry-After", "1")
		writeError(w, errcode.Errorf(errcode.CodeBusy, "follow %s: this node (%s) already serves %d event streams (--max-followers); retry later, through another node, or long-poll with ?wait=", name, d.cfg.Node, maxStreams))
		return
	}
	defer d.followers.Add(-1)
	d.followStream(w, r, name, after, limit)
}

// followStream serves one event stream of cell name after position after,
// reading limit records at a time, until the client goes away, the node
// shuts down, or a read fails in a way no retry mends (an event "error"
// with the DEED error body is then the stream's last). The caller has
// checked the request and counted the stream against --max-followers.
func (d *Daemon) followStream(w http.ResponseWriter, r *http.Request, name string, after replication.Pos, limit int) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(d.streamsCtx, cancel) // the node shutting down ends the stream
	defer stop()
	rc := http.NewResponseController(w)
	// The server's write bound is for one answer; a stream's bound is
	// for each event: a client that stops reading for apiWriteTimeout
	// loses its stream, one that reads does not.
	send := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(apiWriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // a proxy in front must not buffer it
	w.WriteHeader(http.StatusOK)
	if !send(fmt.Appendf(nil, "retry: %d\n\n", sseReconnect.Milliseconds())) {
		return
	}
	heartbeat := d.sseHeartbeat
	if heartbeat <= 0 {
		heartbeat = sseHeartbeat
	}
	// A read without ?wait= or follow: the request the loop routes.
	rr := r.Clone(ctx)
	rr.Header = rr.Header.Clone()
	rr.Header.Del("Last-Event-ID")
	u := *r.URL
	rr.URL = &u
	pause := sseRetryMin
	last := time.Now()
	var buf []byte
	for ctx.Err() == nil {
		recs, err := d.followRead(rr, name, after, limit, heartbeat)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			if !streamRetryable(errcode.CodeOf(err)) {
				send(errorEvent(err))
				return
			}
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			pause = min(2*pause, sseRetryMax)
		} else {
			pause = sseRetryMin
		}
		buf = buf[:0]
		for _, rec := range recs {
			if rec.Pos <= uint64(after) {
				continue // never twice, whatever a node answers
			}
			data, _ := json.Marshal(rec)
			buf = fmt.Appendf(buf, "id: %d\ndata: %s\n\n", rec.Pos, data)
			after = replication.Pos(rec.Pos)
		}
		if len(buf) == 0 && time.Since(last) >= heartbeat {
			buf = append(buf, ": heartbeat\n\n"...)
		}
		if len(buf) > 0 {
			if !send(buf) {
				return
			}
			last = time.Now()
		}
	}
	if d.streamsCtx.Err() != nil && r.Context().Err() == nil {
		send(errorEvent(errcode.Errorf(errcode.CodeUnavailable, "follow %s: node %s is shutting down; reconnect (with Last-Event-ID) through another node", name, d.cfg.Node)))
	}
}

// errorEvent is the event "error" that ends a stream: the DEED error body
// the endpoint would have answered, as its data.
func errorEvent(err error) []byte {
	data, _ := json.Marshal(errorBodyOf(err))
	return fmt.Appendf(nil, "event: error\ndata: %s\n\n", data)
}

// streamRetryable reports whether the stream's loop reads again after a
// read that failed with code: the store or a node unreachable, a holder
// at its bound of waiting reads, the cell moving or changing owner. Any
// other failure ends the stream with an event "error".
func streamRetryable(code errcode.Code) bool {
	switch code {
	case errcode.CodeUnavailable, errcode.CodePeer, errcode.CodeBusy, errcode.CodeAmbiguous,
		errcode.CodeSuperseded, errcode.CodeReleased, errcode.CodeNodeFenced, errcode.CodeNotHolder, errcode.CodeHeld:
		return true
	}
	return false
}

// followRead is one read of the stream's loop: the records after after,
// waiting up to wait for one. Within a fleet it is forwarded to the
// holder as a waiting read is; on a cell held here it waits on the log;
// otherwise it reads the bucket and waits unheldPoll. Whatever woke it,
// it answers (possibly empty) rather than waiting on, so that the next
// read is routed where the cell is then.
func (d *Daemon) followRead(r *http.Request, name string, after replication.Pos, limit int, wait time.Duration) ([]client.Record, error) {
	q := r.URL.Query()
	q.Del("follow")
	q.Set("after", strconv.FormatUint(uint64(after), 10))
	q.Set("limit", strconv.Itoa(limit))
	q.Set("wait", wait.String())
	r.URL.RawQuery = q.Encode()
	bw := &bufferedAnswer{h: http.Header{}}
	if d.forwardWait(bw, r, name, wait) {
		return bw.records()
	}
	var changed <-chan struct{}
	if c := d.held(name); c != nil {
		changed = c.log.Changed() // before the read: a commit after it wakes us
	}
	recs, _, err := d.readRecords(bw, r, name, after, limit, false)
	if err != nil || len(recs) > 0 {
		return apiRecords(recs), err
	}
	if changed == nil {
		wait = min(wait, unheldPoll)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-changed:
	case <-t.C:
	case <-r.Context().Done():
	}
	return nil, nil
}

// apiRecords is recs as the records endpoint answers them.
func apiRecords(recs []replication.Record) []client.Record {
	out := make([]client.Record, len(recs))
	for i, rec := range recs {
		out[i] = client.Record{Pos: uint64(rec.Pos), Epoch: rec.Epoch, TxID: uint64(rec.TxID), TS: rec.TS, Data: rec.Data}
	}
	return out
}

// bufferedAnswer is an answer kept in memory: what a forwarded read of
// the stream's loop answered, decoded rather than relayed.
type bufferedAnswer struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedAnswer) Header() http.Header { return b.h }

func (b *bufferedAnswer) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

func (b *bufferedAnswer) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

// records decodes the answer: its records, or the DEED error it carries.
func (b *bufferedAnswer) records() ([]client.Record, error) {
	if b.status/100 == 2 {
		var v client.ReadResult
		if err := json.Unmarshal(b.body.Bytes(), &v); err != nil {
			return nil, errcode.Errorf(errcode.CodeUnavailable, "read forwarded to %s: answer %d is not a read's: %v", b.h.Get(HeaderNode), b.status, err)
		}
		return v.Records, nil
	}
	var e client.ErrorBody
	if err := json.Unmarshal(b.body.Bytes(), &e); err != nil || e.Code == "" {
		return nil, errcode.Errorf(errcode.CodeUnavailable, "read forwarded to %s: answer %d carries no DEED error", b.h.Get(HeaderNode), b.status)
	}
	return nil, &errcode.Error{Code: e.Code, Msg: e.Error}
}
