package simulation

import (
	"context"
	"flag"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/replication"
)

// Keyed appends: a share of the schedule's appends carry an idempotency key
// and are retried with it, as the Go client does, across whatever the
// schedule does meanwhile (crashes, pauses, lost answers, forced claims,
// moves); some are conditional (match_pos) and some, once answered, are
// sent once more (a client that lost the answer it had). They are one
// operation each in the history, from the first call to the last answer,
// so the checkers of plain appends judge them: a key that landed twice is
// a record in the final log twice, a replay that names another position is
// an acknowledged record restored elsewhere. The draws hash the step's id
// (draw), so the schedules of every seed are as they were.

var keyedFlag = flag.Int("keyed", 40, "percent of appends sent with an idempotency key and retried with it")

const (
	// simKeyWindow is the idempotency window of the simulation's logs (and
	// of its GC), short so that GC still deletes files during a run.
	simKeyWindow = 3 * time.Second
	// keyedRetryFor bounds a keyed append's retries, from its first call:
	// within the window, which is what the promise covers.
	keyedRetryFor = 2500 * time.Millisecond
)

// keyedAppend is append with a key (the step's id), retried until its
// outcome is known or keyedRetryFor has passed.
func (w *world) keyedAppend(ctx context.Context, n *simNode, cell, id string, dur time.Duration) {
	deadline := time.Now().Add(keyedRetryFor)
	conditional := draw(w.seed, "match", id)%100 < 30
	var (
		a       *appendOp
		res     replication.Result
		err     error
		unknown error
		opts    = replication.AppendOptions{Key: id}
	)
	for attempt := 0; ; attempt++ {
		actx := ctx
		if attempt > 0 {
			var cancel context.CancelFunc
			end := time.Now().Add(dur)
			if end.After(deadline) {
				end = deadline
			}
			actx, cancel = context.WithDeadline(context.Background(), end)
			defer cancel()
		}
		var sent bool
		res, err, sent = w.keyedTry(actx, n, cell, id, &a, &opts, conditional)
		if !sent && a == nil {
			return // never routed anywhere: no operation
		}
		if errcode.CodeOf(err) == errcode.CodeAmbiguous {
			unknown = err
		}
		if err == nil || errcode.CodeOf(err) == errcode.CodePosMismatch || time.Now().Add(backoff(attempt)).After(deadline) {
			break
		}
		w.h.count("keyed append retried")
		time.Sleep(backoff(attempt))
	}
	if err != nil && unknown != nil && errcode.CodeOf(err) != errcode.CodePosMismatch {
		err = unknown // an earlier attempt may have landed
	}
	a.ret, a.out, a.res, a.err = w.h.now(), classify(err), res, err
	w.h.addAppend(a)
	if err != nil {
		w.h.logf("keyed append %s %s: %s %s", cell, a.data, a.out, shortErr(err))
		return
	}
	w.h.logf("keyed append %s %s e%d: ok pos %d tx %d replayed %v", cell, a.data, res.Epoch, res.Pos, res.TxID, res.Replayed)
	if opts.MatchPos != 0 && res.Pos != opts.MatchPos {
		w.h.violate("%s: conditional append %s (match_pos %d) acknowledged at position %d", cell, a.data, opts.MatchPos, res.Pos)
	}
	if draw(w.seed, "dup", id)%100 >= 40 {
		return
	}
	// The same request once more, now or a little later (maybe on another
	// owner): it must be answered with the first result, writing nothing.
	time.Sleep(time.Duration(draw(w.seed, "dupwait", id)%2000) * time.Millisecond)
	if time.Now().After(deadline) {
		return
	}
	dctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	again, derr, _ := w.keyedTry(dctx, n, cell, id, &a, &opts, conditional)
	switch {
	case errcode.CodeOf(derr) == errcode.CodePosMismatch:
		w.h.violate("%s: key %s, acknowledged at %d, answered a mismatch when sent again: %v", cell, id, res.Pos, derr)
	case derr != nil:
	case !again.Replayed:
		w.h.violate("%s: key %s, acknowledged at %d, was written again at %d", cell, id, res.Pos, again.Pos)
	case again.Pos != res.Pos || again.Epoch != res.Epoch || again.TxID != res.TxID || again.TS != res.TS:
		w.h.violate("%s: key %s replayed as pos %d epoch %d tx %d ts %d, first answered pos %d epoch %d tx %d ts %d",
			cell, id, again.Pos, again.Epoch, again.TxID, again.TS, res.Pos, res.Epoch, res.TxID, res.TS)
	default:
		w.h.count("keyed append replayed")
	}
}

func backoff(attempt int) time.Duration {
	return min(100*time.Millisecond<<min(attempt, 3), 800*time.Millisecond)
}

// keyedTry is one attempt of a keyed append, routed as append routes: it
// makes the operation *a on its first route and, for a conditional one,
// fixes the position it names from the first holder's view of its log's
// end (which may be stale: the holder may have been fenced).
func (w *world) keyedTry(ctx context.Context, n *simNode, cell, id string, a **appendOp, opts *replication.AppendOptions, conditional bool) (replication.Result, error, bool) {
	var res replication.Result
	var err error
	sent := false
	for try := 0; try < maxRoutes; try++ {
		inc, cl := w.route(ctx, n, cell)
		if cl == nil {
			if err == nil {
				err = errcode.Errorf(errcode.CodeUnavailable, "no holder for %s", cell)
			}
			break
		}
		if *a == nil {
			*a = &appendOp{cell: cell, data: inc.client + ":" + id, call: w.h.now()}
			if conditional {
				opts.MatchPos = cl.log.Head().NextPos
			}
		}
		(*a).inc, (*a).epoch = inc.id, cl.lease.Epoch()
		cl.lastUsed.Store(time.Now().UnixNano())
		sent = true
		res, err = cl.log.AppendWith(ctx, cl.lease, []byte((*a).data), *opts)
		if !inc.retiredUnder(ctx, cl, err) {
			break
		}
		w.h.count("append routed again")
	}
	return res, err, sent
}
