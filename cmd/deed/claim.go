package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

func newClaimCmd(cfg *config) *cobra.Command {
	var (
		force bool
		wait  time.Duration
		hold  bool
		ttl   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "claim CELL",
		Short: "Claim a cell for --node, directly against the bucket",
		Long: `claim makes --node the owner of CELL for a new epoch, by a conditional write
of cells/CELL/own.json, and prints {"cell","node","epoch"}.

A cell held by another live node is refused with DEED-E020 (naming the owner
and its address), exit 4. A node is live while its node lease keeps
changing; one look cannot tell a live node from a dead one, so a claim
without history treats the owner as live. --wait DUR keeps trying for DUR:
the owner is taken over once it releases the cell, or once its node lease
was seen unchanged for its TTL + margin (it is dead). --force takes the cell
from a live owner at once (an operator action: safe for data, because the
new owner seals the old epoch before writing, but the old owner is cut off).

Every claim fences the older epochs before it returns, as a writer does
before its first write: it seals the newest epoch with data at its chain end
(and tombstones the epochs between), so a stale owner's next append fails
with DEED-E021 and nothing it acknowledged is lost.

Without --hold, claim records the claim, seals its own (empty) epoch, and
exits. This process has no node lease, so the record is advisory: it fences
every older epoch, but any node can take the cell over at once (unless a
daemon runs as --node and keeps that node's lease alive).

With --hold, claim opens a node lease for --node (renewed every TTL/3),
claims, prints, and holds the cell until SIGINT or SIGTERM, then releases
the cell and the node lease (within 10s). If the lease is lost meanwhile
(another node forced a claim, the cell was force-released, or the node lease
could not be renewed in time) it exits 3 with DEED-E021 or DEED-E025.`,
		Example: `  deed claim tenant-42 --node web-1
  deed claim tenant-42 --node web-2 --wait 30s
  deed claim tenant-42 --node ops --force --json
  deed claim tenant-42 --node web-1 --hold --ttl 10s`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cell := args[0]
			if err := cfg.validNames(true, cell); err != nil {
				return err
			}
			if wait < 0 {
				return bucket.Errorf(bucket.CodeBadRequest, "--wait %v: must not be negative", wait)
			}
			if err := owner.ValidateTTL(ttl); err != nil {
				return bucket.Wrap(err, "--ttl")
			}
			b, _, err := cfg.openBucket(ctx)
			if err != nil {
				return err
			}
			log := cfg.nodeLog(cmd)
			n, err := owner.NewNode(b, owner.Config{Name: cfg.node, TTL: ttl, Logger: log})
			if err != nil {
				return bucket.Wrap(err, "--ttl")
			}
			if hold {
				if err := n.Open(ctx); err != nil {
					return bucket.Wrap(err, "claim %s", cell)
				}
			}
			l, err := claimWait(ctx, n, cell, force, wait, log)
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
				return bucket.Wrap(err, "claim %s: claimed at epoch %d, but could not seal the older epochs", cell, l.Epoch())
			}
			v := claimView{Cell: cell, Node: l.Node(), Epoch: l.Epoch()}
			if cfg.json {
				writeJSON(cfg.inv.Stdout, v)
			} else if hold {
				fmt.Fprintf(cfg.inv.Stdout, "holding cell %s for node %s at epoch %d (SIGINT or SIGTERM releases it)\n", v.Cell, v.Node, v.Epoch)
			} else {
				fmt.Fprintf(cfg.inv.Stdout, "claimed cell %s for node %s at epoch %d\n", v.Cell, v.Node, v.Epoch)
			}
			if !hold {
				// This process writes nothing under the claim: seal its
				// epoch's (empty) chain end, and keep the claim recorded.
				// The node was never opened, and is not closed: that would
				// release the claim. A seal that fails is left to the next
				// claimer, which seals an abandoned epoch anyway.
				if err := closeLog(ctx, lg); err != nil {
					log.Warn("sealing the claim's own epoch failed; the next owner seals it", "cell", cell, "err", err)
				}
				return nil
			}
			return holdLease(ctx, b, n, l, lg, log)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&force, "force", false, "take the cell even from a live owner (operator action)")
	f.DurationVar(&wait, "wait", 0, "keep trying this long while a live node holds the cell (0: fail at once)")
	f.BoolVar(&hold, "hold", false, "keep a node lease alive and hold the cell until SIGINT/SIGTERM, then release it")
	f.DurationVar(&ttl, "ttl", owner.DefaultTTL, "node lease TTL with --hold (renewed every TTL/3); also the least TTL assumed when judging the owner dead")
	return cmd
}

// holdLease keeps l until ctx ends (SIGINT/SIGTERM), then seals its log,
// releases it and closes the node; or until the lease is lost, which is
// returned (exit 3).
func holdLease(ctx context.Context, b bucket.Bucket, n *owner.Node, l *owner.Lease, lg *replication.Log, log *slog.Logger) error {
	w := startWatch(ctx, b, l, n.Params().TTL, log)
	select {
	case <-ctx.Done():
		w.stop()
		if err := closeLog(ctx, lg); err != nil {
			log.Warn("sealing the log failed; the next owner seals it", "cell", l.Cell(), "err", err)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		err := l.Release(rctx)
		cancel()
		closeNode(ctx, n, log)
		if err != nil {
			return bucket.Wrap(err, "release %s", l.Cell())
		}
		return nil
	case <-l.Done():
		w.stop()
		_ = closeLog(ctx, lg)
		closeNode(ctx, n, log)
		return bucket.Wrap(l.Err(), "hold %s", l.Cell())
	}
}

// closeLog closes (seals) a log within releaseTimeout.
func closeLog(ctx context.Context, lg *replication.Log) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	return lg.Close(cctx)
}
