package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/deedkit/deed/bucket"
)

// storeReportEvery is how often a store outage that goes on is summarised.
const storeReportEvery = 30 * time.Second

// longErr is the length from which an error in a warning or error line is
// cut to its short cause, the whole chain going to a debug line.
const longErr = 160

// storeHealth turns the daemon's store requests into one log line per
// outage instead of one per failed request: a warning at the first failure
// with its short cause, a summary every storeReportEvery while it lasts,
// and one at recovery ("store reachable again after 12s, 37 failures").
// Each failure's full error chain is logged at debug.
type storeHealth struct {
	// log is the daemon's logger before storeLogHandler wraps it: observe
	// logs under mu, and the handler takes mu.
	log *slog.Logger

	mu         sync.Mutex
	down       bool
	since      time.Time // first failure of the current outage
	failures   int
	lastReport time.Time
}

// unreachable reports whether err says the store could not be reached or
// did not answer: the errors an outage produces, as opposed to answers
// (not found, precondition failed, denied).
func unreachable(err error) bool {
	return errors.Is(err, bucket.ErrUnavailable) || errors.Is(err, bucket.ErrAmbiguous)
}

// observe records the outcome of one store request.
func (h *storeHealth) observe(op string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if err == nil || !unreachable(err) {
		// Any answer, even a refusal, means the store is reachable.
		if h.down {
			h.log.Info("store reachable again", "after", now.Sub(h.since).Round(time.Second), "failures", h.failures)
			h.down = false
		}
		return
	}
	h.failures++
	if !h.down {
		h.down, h.since, h.failures, h.lastReport = true, now, 1, now
		h.log.Warn("store unreachable; retrying, further failures are summarised", "op", op, "cause", shortCause(err))
	} else if now.Sub(h.lastReport) >= storeReportEvery {
		h.lastReport = now
		h.log.Warn("store still unreachable", "for", now.Sub(h.since).Round(time.Second), "failures", h.failures, "cause", shortCause(err))
	}
	h.log.Debug("store request failed", "op", op, "err", err)
}

// isDown reports whether an outage is under way.
func (h *storeHealth) isDown() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down
}

// shortCause is err in one short phrase: the failed operation and key, its
// kind and status, and the network error under it ("put nodes/a.json: store
// unavailable: dial tcp 10.0.0.9:443: connect: connection refused"),
// without the SDK's retry and request layers.
func shortCause(err error) string {
	var op *bucket.OpError
	if !errors.As(err, &op) {
		return truncate(err.Error(), longErr)
	}
	// Keep what the wrapping layers said ("renew node lease: "), up to the
	// store error itself.
	prefix, _, _ := strings.Cut(err.Error(), op.Error())
	msg := truncate(prefix, longErr) + fmt.Sprintf("%s %s: %v", op.Op, op.Key, op.Kind)
	if op.Status != 0 || op.Code != "" {
		msg += fmt.Sprintf(" (%d %s)", op.Status, op.Code)
	}
	var ne *net.OpError
	switch {
	case errors.As(op.Err, &ne):
		msg += ": " + ne.Error()
	case op.Status == 0 && op.Err != nil:
		inner := op.Err
		for u := errors.Unwrap(inner); u != nil; u = errors.Unwrap(inner) {
			inner = u
		}
		msg += ": " + inner.Error()
	}
	return truncate(msg, 2*longErr)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// storeLogHandler keeps the daemon's log readable through a store outage.
// While storeHealth reports one, warnings whose error is the outage's (a
// renewal retried, a peer observation failed) go to debug: the outage's
// own lines say it. Any warning or error whose error is long is printed with its
// short cause, the full chain following at debug.
type storeLogHandler struct {
	inner slog.Handler
	h     *storeHealth
}

func (s storeLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return s.inner.Enabled(ctx, l)
}

func (s storeLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return storeLogHandler{inner: s.inner.WithAttrs(as), h: s.h}
}

func (s storeLogHandler) WithGroup(name string) slog.Handler {
	return storeLogHandler{inner: s.inner.WithGroup(name), h: s.h}
}

func (s storeLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return s.inner.Handle(ctx, r)
	}
	var err error
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			err, _ = a.Value.Any().(error)
			return false
		}
		return true
	})
	if err == nil {
		return s.inner.Handle(ctx, r)
	}
	if r.Level == slog.LevelWarn && unreachable(err) && s.h.isDown() {
		if !s.inner.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		d := slog.NewRecord(r.Time, slog.LevelDebug, r.Message, r.PC)
		r.Attrs(func(a slog.Attr) bool { d.AddAttrs(a); return true })
		return s.inner.Handle(ctx, d)
	}
	if len(err.Error()) <= longErr {
		return s.inner.Handle(ctx, r)
	}
	short := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			a = slog.String("err", shortCause(err))
		}
		short.AddAttrs(a)
		return true
	})
	if herr := s.inner.Handle(ctx, short); herr != nil {
		return herr
	}
	if s.inner.Enabled(ctx, slog.LevelDebug) {
		full := slog.NewRecord(r.Time, slog.LevelDebug, r.Message+" (full error)", r.PC)
		full.AddAttrs(slog.Any("err", err))
		return s.inner.Handle(ctx, full)
	}
	return nil
}
