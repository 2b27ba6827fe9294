package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// fleetSecretFile writes the fleet secret every node of an e2e fleet
// shares (--fleet-secret-file) and returns its path.
func fleetSecretFile(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "fleet-secret")
	if err := os.WriteFile(file, []byte("e2e-fleet-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// e2eFleet is a fleet of `deed run` processes under test: which nodes
// clients may send to, every node's address, and its process. A node
// restarted has a new address; clients pick among the nodes that are up.
type e2eFleet struct {
	mu   sync.Mutex
	up   map[string]string // node → base URL, of the nodes clients use
	all  map[string]string
	proc map[string]*proc
}

func newE2EFleet() *e2eFleet {
	return &e2eFleet{up: map[string]string{}, all: map[string]string{}, proc: map[string]*proc{}}
}

// pick returns a random node clients may use, and its address.
func (f *e2eFleet) pick() (string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.up))
	for n := range f.up {
		names = append(names, n)
	}
	n := names[rand.N(len(names))]
	return n, f.up[n]
}

// setUp says whether clients may send to node, at base.
func (f *e2eFleet) setUp(node, base string, up bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if up {
		f.up[node], f.all[node] = base, base
	} else {
		delete(f.up, node)
	}
}

// addrs returns a copy of every node's address.
func (f *e2eFleet) addrs() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]string, len(f.all))
	for n, b := range f.all {
		out[n] = b
	}
	return out
}

// holderOf returns the node whose /v1/cells lists cell, or "" when none
// answering does (a node down or paused is skipped).
func (f *e2eFleet) holderOf(cell string) string {
	for n, base := range f.addrs() {
		for _, h := range heldCellsQuiet(base) {
			if h == cell {
				return n
			}
		}
	}
	return ""
}
