package replication

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// The transitions table is the only place a log's state changes: final
// states have no way out, and a move the table lacks is an error that ends
// the log (abandoned) instead of leaving it in a state its other code does
// not expect.
func TestLogStateTransitions(t *testing.T) {
	for _, s := range []state{stateClosed, stateAbandoned} {
		if !s.final() || len(transitions[s]) != 0 {
			t.Errorf("%s: final %v, transitions %v; want final, none", s, s.final(), transitions[s])
		}
	}
	l := &Log{s: store{cell: "c", cfg: &config{logger: slog.New(slog.DiscardHandler)}}, epoch: 1}
	for _, to := range []state{stateClosing, stateCloseFailed, stateClosing, stateAbandoning, stateAbandoned} {
		if err := l.moveLocked(to); err != nil {
			t.Fatalf("→ %s: %v", to, err)
		}
	}
	if err := l.moveLocked(stateOpen); err == nil || l.state != stateAbandoned {
		t.Fatalf("abandoned → open: %v, state %s; want an error and the log abandoned", err, l.state)
	}
}

// syncBuf is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// An impossible transition (a bug) ends that cell's log, not the process:
// the log refuses appends and its Close with the error, which is logged
// and counted, and another cell's log on the same node goes on.
func TestImpossibleTransitionEndsOnlyThatLog(t *testing.T) {
	m := fakes3.NewMem()
	n, err := owner.NewNode(m, owner.Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuf
	opt := WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	open := func(cell string) (*owner.Lease, *Log) {
		lease, err := n.Claim(t.Context(), cell, owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lg, err := Open(t.Context(), m, lease, opt)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lg.Append(t.Context(), lease, []byte("x")); err != nil {
			t.Fatal(err)
		}
		return lease, lg
	}
	la, a := open("a")
	lb, b := open("b")
	before := InternalErrors()

	a.mu.Lock()
	merr := a.moveLocked(stateClosed) // open → closed is not in the table
	a.mu.Unlock()
	forget(a)
	if errcode.CodeOf(merr) != errcode.CodeUnavailable || !strings.Contains(merr.Error(), "no transition from open to closed") || !strings.Contains(merr.Error(), "release the cell") {
		t.Fatalf("impossible transition: %v", merr)
	}
	if got := InternalErrors() - before; got != 1 {
		t.Errorf("InternalErrors grew by %d, want 1", got)
	}
	if !strings.Contains(logs.String(), "level=ERROR msg=\"log ended by an internal error") {
		t.Errorf("no error logged:\n%s", logs.String())
	}
	if _, err := a.Append(t.Context(), la, []byte("y")); err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Errorf("append to the ended log: %v", err)
	}
	if err := a.Close(t.Context()); !errors.Is(err, ErrInternal) {
		t.Errorf("close of the ended log: %v", err)
	}
	// Nothing is left to seal: its lease is released as it is.
	if err := la.Release(t.Context()); err != nil {
		t.Errorf("release of the ended log's lease: %v", err)
	}
	// The other cell's log is untouched.
	if _, err := b.Append(t.Context(), lb, []byte("y")); err != nil {
		t.Errorf("append to another cell's log: %v", err)
	}
	if err := b.Close(t.Context()); err != nil {
		t.Errorf("close of another cell's log: %v", err)
	}
	if err := lb.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}
