package main

import (
	"net"
	"sync"
	"testing"
)

// cutProxy is a TCP proxy the fault run puts between a daemon and the
// store, and in front of the address a daemon advertises to its peers.
// Cut, it stalls every byte both ways and holds new connections open
// without dialling (a partition: nothing is refused, nothing arrives;
// what was stalled is delivered once healed, like TCP after a partition).
// Down, it does not listen, so a dial is refused, as it is to a node
// whose process has exited.
type cutProxy struct {
	addr string // host:port it listens on, the same across down and up

	mu     sync.Mutex
	cond   *sync.Cond
	target string // host:port; "" holds connections until set
	cut    bool
	ln     net.Listener
	conns  map[net.Conn]struct{}
	closed bool
}

// newCutProxy listens on a free loopback port and forwards to target
// ("" until setTarget).
func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{addr: ln.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.serve(ln)
	t.Cleanup(func() {
		p.mu.Lock()
		p.closed = true
		p.cond.Broadcast()
		p.mu.Unlock()
		p.down()
	})
	return p
}

func (p *cutProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.handle(c)
		}
	}()
}

func (p *cutProxy) setTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.cond.Broadcast()
	p.mu.Unlock()
}

// setCut cuts (true) or heals (false) the link.
func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	p.cond.Broadcast()
	p.mu.Unlock()
}

// down stops listening and closes every connection: what a peer sees of
// a node whose process exited.
func (p *cutProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
}

// up listens again on the same address (down then up: a restart).
func (p *cutProxy) up(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("proxy %s up again: %v", p.addr, err)
	}
	p.serve(ln)
}

// gate waits while the link is cut or has no target, and returns the
// target ("" once the proxy is closed).
func (p *cutProxy) gate() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.closed && (p.cut || p.target == "") {
		p.cond.Wait()
	}
	if p.closed {
		return ""
	}
	return p.target
}

func (p *cutProxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *cutProxy) handle(c net.Conn) {
	p.track(c, true)
	defer p.track(c, false)
	defer c.Close()
	target := p.gate()
	if target == "" {
		return
	}
	u, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	p.track(u, true)
	defer p.track(u, false)
	defer u.Close()
	done := make(chan struct{}, 2)
	go func() { p.copy(u, c); done <- struct{}{} }()
	go func() { p.copy(c, u); done <- struct{}{} }()
	<-done
}

// copy moves bytes from src to dst, each chunk only while the link is
// not cut.
func (p *cutProxy) copy(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if p.gate() == "" {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
