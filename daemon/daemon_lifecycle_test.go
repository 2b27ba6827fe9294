package daemon

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/daemon/daemontest"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// A claim in flight while the node fences must not mint a lease that never
// ends: acquire registers d.wg.Add(1) + AfterEnd(leaseEnded) for it, so
// such a lease would make daemon.Close wait in d.wg.Wait() for ever.
func TestDaemonCloseAfterAClaimRacedAFence(t *testing.T) {
	// Real time: watchNode blocks on the cell's mutex, which synctest does
	// not treat as durably blocking.
	func() {
		m := fakes3.NewMem()
		const ttl = owner.MinTTL
		d, err := Open(t.Context(), Config{Node: "a", TTL: ttl}, m.Client("a"), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		// The node lease can no longer be renewed; the claim's PUT is slow
		// and lands after the node fenced.
		rmPut := m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpPut, Key: owner.NodeKey("a"), Fault: fakes3.ErrBefore})
		rmGet := m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpGet, Key: owner.NodeKey("a"), Fault: fakes3.ErrBefore})
		m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpPut, Key: owner.CellKey("c"), Latency: ttl})
		c, err := d.acquire(t.Context(), "c", false)
		// The race the test is about happened: the node fenced while the
		// claim was in flight (else the test proved nothing).
		if !fencedOnce(d) {
			t.Fatal("setup: the node did not fence during the slow claim")
		}
		if err == nil && c.lease.Err() == nil {
			t.Errorf("acquire returned a live lease of epoch %d although the node fenced meanwhile", c.lease.Epoch())
		}
		rmPut()
		rmGet()
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done <- d.Close(ctx)
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon.Close after the fence: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("daemon.Close hung (still waiting 20s later, its ctx had a 10s deadline)")
		}
	}()
}

// fencedOnce reports whether d's node has fenced since it opened (its
// event ring records each fence).
func fencedOnce(d *Daemon) bool {
	for _, e := range d.events.recent() {
		if e.Kind == "fence" {
			return true
		}
	}
	return false
}

// A release whose log Close fails (here: the seal PUT cannot land before
// the request's context ends) must leave the cell releasable: the lease
// stays valid and the cell held, appends are refused as "retry the
// release" (503 DEED-E011), and a further release completes. A sticky
// close error would wedge the cell on this node until its lease ended some
// other way.
func TestFailedReleaseCanBeRetried(t *testing.T) {
	func() {
		m := fakes3.NewMem()
		const ttl = 2 * time.Second
		d, err := Open(t.Context(), Config{Node: "a", TTL: ttl}, m.Client("a"), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer closeOK(t, d)
		c, err := d.acquire(t.Context(), "c", false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.log.Append(t.Context(), c.lease, []byte("x")); err != nil {
			t.Fatal(err)
		}
		// A brief brownout of the log's slots while an operator releases
		// with a short deadline (or the HTTP client disconnects).
		rm := m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpPut, KeyPrefix: "cells/c/ltx/", Fault: fakes3.SlowDown})
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		_, err = d.release(ctx, "c")
		cancel()
		if err == nil {
			t.Fatal("setup: release should fail during the brownout")
		}
		rm() // the store is healthy again
		if _, err := d.release(t.Context(), "c"); err != nil {
			t.Errorf("release after the store healed still fails: %v", err)
		}
		c2, err := d.acquire(t.Context(), "c", false)
		if err != nil {
			t.Fatalf("acquire after the failed release: %v", err)
		}
		if _, err := c2.log.Append(t.Context(), c2.lease, []byte("y")); err != nil {
			t.Errorf("append after the failed release: %v (code %s, HTTP %d)", err, errcode.CodeOf(err), httpStatus(errcode.CodeOf(err)))
		}
	}()
}

// A claim whose log cannot open gives the cell back; when that release
// fails too, the daemon says so (it used to drop the error): the cell's
// record still names this node.
func TestFailedGiveBackAfterOpenIsLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		var buf daemontest.SyncBuffer
		d, err := Open(t.Context(), Config{Node: "a", TTL: 2 * time.Second}, m.Client("a"), slog.New(slog.NewTextHandler(&buf, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer closeOK(t, d)
		// A cell released at epoch 1: epoch 2's log must fence (epoch 1's
		// opens without a request). The claim's create-only guess is
		// refused, its If-Match PUT lands, the give-back fails.
		m.Set(owner.CellKey("c"), []byte(`{"node":"","epoch":1,"nonce":"n","at_ms":1}`))
		rmLog := m.Inject(fakes3.Rule{Client: "a", KeyPrefix: replication.LogPrefix("c"), Fault: fakes3.ErrBefore})
		rmRec := m.Inject(fakes3.Rule{Client: "a", Op: fakes3.OpPut, Key: owner.CellKey("c"), Skip: 2, Fault: fakes3.ErrBefore})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err = d.acquire(ctx, "c", false)
		cancel()
		if err == nil {
			t.Fatal("setup: the claim succeeded although its log could not open")
		}
		rmLog()
		rmRec()
		if got := buf.String(); !strings.Contains(got, `level=WARN msg="giving the cell back after its log failed to open failed" cell=c epoch=2`) {
			t.Errorf("no warning for the failed give-back:\n%s", got)
		}
	})
}

// A dropped cell's log (here: the node fenced in a partition) is sealed
// in the background; when that fails the daemon says so at debug, the
// store being unreachable (it used to drop the error).
func TestFailedSealOfADroppedLogIsLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		var buf daemontest.SyncBuffer
		const ttl = 2 * time.Second
		d, err := Open(t.Context(), Config{Node: "a", TTL: ttl}, m.Client("a"), slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
		if err != nil {
			t.Fatal(err)
		}
		defer closeOK(t, d)
		c, err := d.acquire(t.Context(), "c", false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.log.Append(t.Context(), c.lease, []byte("x")); err != nil {
			t.Fatal(err)
		}
		m.Partition("a", true)
		time.Sleep(3 * ttl) // fenced, and the seal's TTL budget spent
		synctest.Wait()
		m.Partition("a", false)
		if !fencedOnce(d) {
			t.Fatal("setup: the node did not fence")
		}
		if got := buf.String(); !strings.Contains(got, `level=DEBUG msg="sealing a dropped cell's log failed; its next owner seals it" cell=c epoch=1`) {
			t.Errorf("no line for the failed seal:\n%s", got)
		}
	})
}
