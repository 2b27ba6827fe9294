// Package serve holds what deed's HTTP servers (the daemon's API and the
// embedded store) share to bound what clients can make them hold.
package serve

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// NewLimiter is ln with at most max connections open; set the server's
// ConnState to its Track, and serve it.
func NewLimiter(ln net.Listener, max int) *Limiter {
	return &Limiter{Listener: ln, max: max, conns: map[net.Conn]connEntry{}}
}

// Limiter caps the connections a server holds open. At the cap, a new
// connection takes the place of the one that has waited longest without a
// request under way (a keep-alive connection between requests, or a new
// one that has sent nothing yet), so idle clients cannot lock out
// a health check or a real request; when every connection is in the middle of a
// request, the new one is closed at once (the header and body timeouts
// bound how long that lasts). The kernel's backlog is never left to fill.
//
// It counts the connections it hands out until they are closed, and learns
// which are idle from the server's ConnState hook (Track), which also
// recognises them inside a TLS connection made on top of this listener.
type Limiter struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[net.Conn]connEntry
}

type connEntry struct {
	state http.ConnState
	since time.Time
}

// limitedConn leaves the limiter's count when it is closed.
type limitedConn struct {
	net.Conn
	l    *Limiter
	once sync.Once
}

func (c *limitedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

func (l *Limiter) Accept() (net.Conn, error) {
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c := &limitedConn{Conn: raw, l: l}
		var victim net.Conn
		l.mu.Lock()
		full := len(l.conns) >= l.max
		if full {
			var since time.Time
			for vc, e := range l.conns {
				if (e.state == http.StateNew || e.state == http.StateIdle) && (victim == nil || e.since.Before(since)) {
					victim, since = vc, e.since
				}
			}
			if victim != nil {
				delete(l.conns, victim)
			}
		}
		if !full || victim != nil {
			l.conns[c] = connEntry{state: http.StateNew, since: time.Now()}
		}
		l.mu.Unlock()
		switch {
		case !full:
			return c, nil
		case victim == nil:
			_ = raw.Close() // every connection is mid-request
		default:
			_ = victim.Close()
			return c, nil
		}
	}
}

// Track is the server's ConnState hook.
func (l *Limiter) Track(c net.Conn, s http.ConnState) {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		c = tc.NetConn()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.conns[c]; !ok {
		return // closed or evicted meanwhile
	}
	switch s {
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
	default:
		l.conns[c] = connEntry{state: s, since: time.Now()}
	}
}

// Open is how many connections the limiter counts as open.
func (l *Limiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}
