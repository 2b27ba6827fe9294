package replication

import "testing"

// The transitions table is the only place a log's state changes: final
// states have no way out, and a move the table lacks panics instead of
// leaving the log in a state its other code does not expect.
func TestLogStateTransitions(t *testing.T) {
	for _, s := range []state{stateClosed, stateAbandoned} {
		if !s.final() || len(transitions[s]) != 0 {
			t.Errorf("%s: final %v, transitions %v; want final, none", s, s.final(), transitions[s])
		}
	}
	l := &Log{s: store{cell: "c"}, epoch: 1}
	l.moveLocked(stateClosing)
	l.moveLocked(stateCloseFailed)
	l.moveLocked(stateClosing)
	l.moveLocked(stateAbandoning)
	l.moveLocked(stateAbandoned)
	defer func() {
		if recover() == nil {
			t.Fatal("abandoned → open did not panic")
		}
	}()
	l.moveLocked(stateOpen)
}
