package serve

import (
	"context"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Rate limits of ErrorLog: at most errorLogBurst lines per errorLogWindow;
// the rest are counted, and the count is logged once the window is over.
const (
	errorLogBurst  = 10
	errorLogWindow = time.Minute
)

// ErrorLog is an http.Server's ErrorLog that writes through l, as a WARN
// record with the server's message, so that --log-format and --log-level
// apply to it (net/http otherwise writes plain lines to stderr, which
// break a JSON log pipeline). Its lines come from clients (a TLS handshake
// that fails, a connection reset), so anyone who can connect could make
// as many as they like: at most 10 a minute are written, then how many
// were suppressed.
func ErrorLog(l *slog.Logger, name string) *log.Logger {
	return log.New(&errorWriter{l: l, name: name, now: time.Now}, "", 0)
}

// errorWriter receives one line of the server's error log per Write.
type errorWriter struct {
	l    *slog.Logger
	name string
	now  func() time.Time

	mu         sync.Mutex
	start      time.Time // of the current window
	n          int       // lines written in it
	suppressed int       // lines dropped in it
	flush      *time.Timer
}

func (w *errorWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if w.start.IsZero() || now.Sub(w.start) >= errorLogWindow {
		w.report()
		w.start, w.n = now, 0
	}
	if w.n >= errorLogBurst {
		w.suppressed++
		if w.flush == nil {
			// The count is logged when the window ends, even if no
			// other line comes.
			w.flush = time.AfterFunc(w.start.Add(errorLogWindow).Sub(now), func() {
				w.mu.Lock()
				defer w.mu.Unlock()
				w.flush = nil
				w.report()
			})
		}
		return len(p), nil
	}
	w.n++
	w.l.LogAttrs(context.Background(), slog.LevelWarn, w.name+" error", slog.String("err", msg))
	return len(p), nil
}

// report logs how many lines were suppressed, if any (w.mu held).
func (w *errorWriter) report() {
	if w.suppressed == 0 {
		return
	}
	w.l.LogAttrs(context.Background(), slog.LevelWarn, w.name+" errors suppressed",
		slog.Int("suppressed", w.suppressed), slog.Duration("window", errorLogWindow),
		slog.Int("limit", errorLogBurst))
	w.suppressed = 0
}
