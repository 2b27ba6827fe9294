package daemon

import (
	"sync"
	"time"
)

// Event is one thing an operator wants to see on the status page: a
// takeover, a fence, a move, an idle release.
type Event struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"` // "takeover", "fence", "move", "idle_release", ...
	Cell   string    `json:"cell,omitempty"`
	Node   string    `json:"node,omitempty"` // the other node involved, if any
	Detail string    `json:"detail,omitempty"`
}

// eventRing keeps the last maxEvents events, so the status page costs a
// bounded amount of memory however long the daemon runs.
type eventRing struct {
	mu   sync.Mutex
	buf  []Event
	next int
	full bool
}

const maxEvents = 200

func (r *eventRing) add(e Event) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.buf == nil {
		r.buf = make([]Event, maxEvents)
	}
	r.buf[r.next] = e
	r.next = (r.next + 1) % maxEvents
	if r.next == 0 {
		r.full = true
	}
}

// recent returns the events newest first.
func (r *eventRing) recent() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.next
	if r.full {
		n = maxEvents
	}
	out := make([]Event, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, r.buf[(r.next-i+maxEvents)%maxEvents])
	}
	return out
}
