package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// claimCLIView is what claim prints: the claim, and whether this process
// holds it (--hold) or only fenced the cell (a one-shot claim).
type claimCLIView struct {
	Cell  string `json:"cell"`
	Node  string `json:"node"`
	Epoch uint64 `json:"epoch"`
	Held  bool   `json:"held"`
}

func newClaimCmd(cfg *config) *cobra.Command {
	var (
		force bool
		wait  time.Duration
		hold  bool
		ttl   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "claim CELL",
		Short: "Fence a cell (a new epoch, its log sealed), or hold it with --hold",
		Long: `claim takes CELL for a new epoch, by a conditional write of
cells/CELL/own.json, and fences every older epoch before it returns, as a
writer does before its first write: it seals the newest epoch with data at
its chain end (and tombstones the epochs between), so a stale owner's next
append fails with DEED-E021 and nothing it acknowledged is lost.

It claims under an identity of its own: a fresh node id <host>-cli-<random>
unless --node names one. DEED_NODE is not read (it names the daemon). A
--node that is a live process's node id (its node lease is present and not
released: a running daemon or exec) is refused with DEED-E020: claiming as
it would re-enter that process's cells and fence it. To cut a live owner
off, use --force under your own id.

A cell held by another live node is refused with DEED-E020 (naming the owner
and its address), exit 4. A node is live while its node lease keeps
changing; one look cannot tell a live node from a dead one, so a claim
without history treats the owner as live. --wait DUR keeps trying for DUR
through every "held" answer: the owner is taken over once it releases the
cell, or once its node lease was seen unchanged for its TTL + margin (it is
dead). --force takes the cell from a live owner at once (an operator
action: safe for data, because of the seals, but the owner is cut off).
Taking a cell from a live owner always needs --force.

Without --hold, claim is a fence: it claims, seals the older epochs and its
own (empty) epoch, releases the record and prints "fenced cell CELL at epoch
N (no holder; the next claimer takes it at once)" ({"held":false} in JSON).
Nobody holds the cell afterwards; the fenced owner learns it at its next
write (DEED-E021), or within TTL/3 for exec and claim --hold.

With --hold, claim opens a node lease for its id (renewed every TTL/3),
claims, prints, and holds the cell until SIGINT or SIGTERM, then releases
the cell and the node lease (within 10s). If the lease is lost meanwhile
(another node forced a claim, the cell was force-released, or the node lease
could not be renewed in time) it exits 3 with DEED-E021 or DEED-E025.`,
		Example: `  deed claim tenant-42 --force
  deed claim tenant-42 --wait 30s
  deed claim tenant-42 --node web-2 --hold --ttl 10s`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cell := args[0]
			if _, err := cfg.ownIdentity(cmd, identityCLI, ""); err != nil {
				return err
			}
			if err := cfg.validNames(true, cell); err != nil {
				return err
			}
			if wait < 0 {
				return errcode.Errorf(errcode.CodeBadRequest, "--wait %v: must not be negative", wait)
			}
			if err := owner.ValidateTTL(ttl); err != nil {
				return errcode.Wrap(err, "--ttl")
			}
			b, _, err := cfg.openBucket(ctx)
			if err != nil {
				return err
			}
			log := cfg.nodeLog(cmd)
			n, err := owner.NewNode(b, owner.Config{Name: cfg.node, TTL: ttl, Logger: log})
			if err != nil {
				return errcode.Wrap(err, "--ttl")
			}
			hw := newHeldWait(wait, n.Params().TTL, log)
			var before func() error
			if hold {
				// Open refuses a node id that a live process renews.
				if err := hw.retry(ctx, "node id", func() error { return n.Open(ctx) }); err != nil {
					return errcode.Wrap(liveNodeHint(err, "claim"), "claim %s", cell)
				}
				defer cfg.dropOwnLease(ctx, b, n, log) // after every path closed n
			} else if cfg.nodeSet {
				// A one-shot claim opens no node lease, so nothing else
				// stops it acting as a live process's id.
				before = func() error { return refuseLiveNode(ctx, b, cfg.node, claimAsLiveHint("claim")) }
			}
			l, err := hw.claim(ctx, n, cell, force, before, claimHeldHint)
			if err != nil {
				if hold {
					closeNode(ctx, n, log)
				}
				return err
			}
			// Fence every older epoch now, as a writer does before its
			// first write: seal the newest epoch with data at its chain end
			// (and tombstone the epochs between), so that a stale owner's
			// next append fails with DEED-E021 instead of landing.
			lg, err := replication.Open(ctx, b, l)
			if err != nil {
				if hold {
					closeNode(ctx, n, log)
				}
				return errcode.Wrap(err, "claim %s: claimed at epoch %d, but could not seal the older epochs", cell, l.Epoch())
			}
			v := claimCLIView{Cell: cell, Node: l.Node(), Epoch: l.Epoch(), Held: hold}
			if !hold {
				// A fence: this process writes nothing under the claim.
				// Seal its epoch's (empty) chain end, then release the
				// record, so that it says what is true: nobody holds the
				// cell. A seal or release that fails is left to the next
				// claimer, which seals an abandoned epoch anyway and finds
				// an owner without a node lease, dead to everyone.
				if err := closeLog(ctx, lg); err != nil {
					log.Warn("sealing the claim's own epoch failed; the next owner seals it", "cell", cell, "err", err)
				}
				if err := releaseAndClose(ctx, n, l, log); err != nil {
					log.Warn("releasing the fenced cell failed; its record names a node without a node lease, which the next claimer takes over at once", "cell", cell, "err", err)
				}
			}
			switch {
			case cfg.json:
				writeJSON(cfg.inv.Stdout, v)
			case hold:
				fmt.Fprintf(cfg.inv.Stdout, "holding cell %s for node %s at epoch %d (SIGINT or SIGTERM releases it)\n", v.Cell, v.Node, v.Epoch)
			default:
				fmt.Fprintf(cfg.inv.Stdout, "fenced cell %s at epoch %d (no holder; the next claimer takes it at once)\n", v.Cell, v.Epoch)
			}
			if !hold {
				return nil
			}
			return holdLease(ctx, n, l, lg, log)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&force, "force", false, "take the cell even from a live owner (operator action: the owner is cut off)")
	f.DurationVar(&wait, "wait", 0, "keep trying this long while the cell (or, with --node, the node id) is held by a live process (0: fail at once)")
	f.BoolVar(&hold, "hold", false, "keep a node lease alive and hold the cell until SIGINT/SIGTERM, then release it")
	f.DurationVar(&ttl, "ttl", owner.DefaultTTL, "node lease TTL with --hold (renewed every TTL/3); also the least TTL assumed when judging the owner dead")
	return cmd
}

// holdLease keeps l until ctx ends (SIGINT/SIGTERM), then seals its log,
// releases it and closes the node; or until the lease is lost, which is
// returned (exit 3). The opened node re-reads the cell's record every
// TTL/3, so a takeover ends l although this process writes nothing.
func holdLease(ctx context.Context, n *owner.Node, l *owner.Lease, lg *replication.Log, log *slog.Logger) error {
	select {
	case <-ctx.Done():
		if err := closeLog(ctx, lg); err != nil {
			log.Warn("sealing the log failed; the next owner seals it", "cell", l.Cell(), "err", err)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		err := l.Release(rctx)
		cancel()
		closeNode(ctx, n, log)
		if err != nil {
			return errcode.Wrap(err, "release %s", l.Cell())
		}
		return nil
	case <-l.Done():
		_ = closeLog(ctx, lg)
		closeNode(ctx, n, log)
		return errcode.Wrap(l.Err(), "hold %s", l.Cell())
	}
}

// closeLog closes (seals) a log within releaseTimeout.
func closeLog(ctx context.Context, lg *replication.Log) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	return lg.Close(cctx)
}
