package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/internal/nonce"
	"github.com/deedkit/deed/owner"
)

// Identities. A node id names one process that renews one node lease, and
// a claim naming a node id re-enters that node's cells (it bumps the epoch
// and fences the holder). So a daemon keeps a stable id (--node, DEED_NODE,
// the hostname), while every other process that claims gets an id of its
// own: two execs on one host, or a claim on a daemon's host, can never
// collide with each other or with the daemon by accident. Acting as a
// running node's id is an operator action asked for by name: --as-node.

// Kinds of CLI identity, the middle part of a generated id.
const (
	identityCLI  = "cli"
	identityExec = "exec"
)

// asNodeFlag is the flag that lets a CLI command act as a live node's id.
const asNodeFlag = "as-node"

// ownIdentity sets cfg.node for a command that claims or releases: --as-node
// NODE, else --node when given, else a fresh "<host>-<kind>-<8 hex>". It
// reports whether the identity may be a live node's (--as-node). DEED_NODE
// is not read here: it names the daemon (and exec hands its own id to its
// command in it), so honouring it would make a CLI act as that process.
func (cfg *config) ownIdentity(cmd *cobra.Command, kind, asNode string) (bool, error) {
	if cmd.Flags().Changed(asNodeFlag) {
		if cfg.nodeSet {
			return false, errcode.Errorf(errcode.CodeBadRequest, "--node and --%s: give one (--%s acts as a running node's id on purpose)", asNodeFlag, asNodeFlag)
		}
		cfg.node = asNode
		return true, nil
	}
	if !cfg.nodeSet {
		cfg.node = newIdentity(kind)
	}
	return false, nil
}

// newIdentity is "<host>-<kind>-<8 hex>": the hostname (bytes outside the
// node-name alphabet replaced by '-', cut to fit the name limit) says where
// the process ran, the random part makes it unique to this process.
func newIdentity(kind string) string {
	suffix := "-" + kind + "-" + nonce.Hex(4)
	host, _ := os.Hostname()
	host = strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			return c
		}
		return '-'
	}, host)
	if host == "" {
		host = "deed"
	}
	if max := owner.MaxNameLen - len(suffix); len(host) > max {
		host = host[:max]
	}
	return host + suffix
}

// refuseLiveNode refuses to act as node while its node lease shows a live
// process: present and not marked released. One look cannot tell a running
// process from one that died without releasing, so both count as live, as
// they do for a claim. Acting as that id would re-enter the cells that
// process holds (fencing it) or release them under it. The answer is
// DEED-E020, so --wait waits it out; next says what works instead for the
// command at hand (only release has --as-node).
func refuseLiveNode(ctx context.Context, b bucket.Bucket, node, next string) error {
	ob, err := owner.NewObserver(b, owner.Params{TTL: owner.DefaultTTL, Margin: owner.DefaultMargin}).Observe(ctx, node)
	if err != nil {
		return errcode.Wrap(err, "read node lease %s", node)
	}
	if !ob.Exists || ob.Released {
		return nil
	}
	addr := ob.Addr
	if addr == "" {
		addr = "unknown address"
	}
	return errcode.Errorf(errcode.CodeHeld, "node id %s is in use by a live process (incarnation %s, %s): acting as it would fence it; %s",
		node, ob.Incarnation, addr, next)
}

// releaseAsLiveHint is what a release under a live node's id can do.
func releaseAsLiveHint(node string) string {
	return fmt.Sprintf("omit --node to act under an id of your own, or pass --%s %s to act as that node on purpose", asNodeFlag, node)
}

// claimAsLiveHint is what a claim or exec under a live node's id can do
// instead: neither may act as a running node, so it is another id, that
// node's own API, or --wait until it stops.
func claimAsLiveHint(cmd string) string {
	return fmt.Sprintf("omit --node to %s under an id of your own (add --force to take a cell from a live holder), ask that node through its API (POST /v1/cells/CELL/claim), or --wait until it stops", cmd)
}

// liveNodeHint adds claimAsLiveHint to the DEED-E020 with which a node
// refuses to open under an id a live process renews.
func liveNodeHint(err error, cmd string) error {
	if errcode.CodeOf(err) != errcode.CodeHeld {
		return err
	}
	return errcode.Errorf(errcode.CodeHeld, "%s; %s", strings.TrimPrefix(err.Error(), string(errcode.CodeHeld)+" "), claimAsLiveHint(cmd))
}

// dropOwnLease deletes the node lease of an id generated for this process
// (not one given with --node) once the node was closed: every exec and
// claim --hold has a fresh id, and their released leases would otherwise
// pile up under nodes/, which every daemon lists each TTL/3. A missing
// lease means what a released one does: the node is dead. The delete is
// conditional on the version this process wrote last (released, its own
// incarnation); anything else is left alone.
func (cfg *config) dropOwnLease(ctx context.Context, b bucket.Bucket, n *owner.Node, log *slog.Logger) {
	if cfg.nodeSet {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	ob, err := owner.NewObserver(b, n.Params()).Observe(dctx, n.Name())
	if err == nil && ob.Exists && ob.Released && ob.Incarnation == n.Incarnation() {
		err = b.Delete(dctx, owner.NodeKey(n.Name()), bucket.IfMatch(ob.ETag))
	}
	if err != nil {
		log.Debug("leaving the node lease in place", "node", n.Name(), "err", err)
	}
}
