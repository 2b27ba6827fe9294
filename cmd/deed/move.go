package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/internal/wait"
	"github.com/deedkit/deed/owner"
)

// The operator's placement commands: move one cell, drain one node. Both
// talk to a daemon, found through the node leases in the bucket unless
// --addr names it.

func newMoveCmd(cfg *config) *cobra.Command {
	var (
		af         apiFlags
		to         string
		secretFile string
	)
	cmd := &cobra.Command{
		Use:   "move CELL --to NODE",
		Short: "Move a cell to another node, through the daemons (a pinned move)",
		Long: `move asks the daemon that holds CELL to hand it off to NODE
(POST /v1/cells/CELL/move?to=NODE): it stops taking requests for the cell,
finishes the appends in flight, seals the log and releases the record; NODE
claims it at once. Requests that arrive meanwhile wait and are then sent to
NODE; no acknowledged record is lost.

NODE keeps the cell pinned: its rebalancer does not move it to the cell's
preferred node while it holds it. The pin lives in NODE's memory only: it
ends when NODE releases the cell (a drain, a shutdown, an idle release) or
restarts.

The holder is found from CELL's ownership record and the holder's node lease
(its advertised address), so move needs --bucket and --fleet-secret-file:
the lease must verify under the fleet secret before the request (and its
bearer token) goes to the address it names. --addr sends the request to that
daemon instead (any node of the fleet once requests are forwarded).
A cell held by no live node is claimed on NODE directly. When the holder's
daemon cannot be reached (its process gone, its lease not yet expired),
NODE is asked instead: it claims the cell once the holder's lease has
expired in its view, and until then answers DEED-E020 naming the holder
(exit 4: retry shortly).

DEED-E040 (exit 2) when NODE is not a live, non-draining node of the fleet;
DEED-E011 (exit 1) when the move could not be made (the daemons run without
a fleet secret, NODE did not claim the cell: then it is released and free,
and the next request claims it).`,
		Example: `  deed move tenant-42 --to web-2 --token-file /etc/deed/token`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cell := args[0]
			if err := cfg.validNames(false, cell); err != nil {
				return err
			}
			if to == "" {
				return errcode.Errorf(errcode.CodeBadRequest, "move %s: --to NODE is required", cell)
			}
			if err := owner.ValidateName("node", to); err != nil {
				return errcode.Wrap(err, "move %s: --to", cell)
			}
			var fallback string // NODE's address, when the holder is asked first
			c, err := placementClient(ctx, cfg, cmd, &af, secretFile, func(b bucket.Bucket, key []byte) (string, error) {
				rec, exists, err := owner.Inspect(ctx, b, cell)
				if err != nil {
					return "", err
				}
				if exists && !rec.Released() && rec.Node != to {
					if addr, err := nodeAddr(ctx, b, key, rec.Node); err == nil {
						fallback, _ = nodeAddr(ctx, b, key, to)
						return addr, nil
					}
				}
				// Held by no running member: NODE claims it itself.
				return nodeAddr(ctx, b, key, to)
			})
			if err != nil {
				return errcode.Wrap(err, "move %s", cell)
			}
			v, err := c.Move(ctx, cell, to)
			if unreached(err) && fallback != "" {
				// The holder's lease is there but its daemon cannot be
				// reached (dead, its lease not yet expired): NODE is asked,
				// which claims the cell once that lease has expired
				// (DEED-E020 until then), as for a cell no live node holds.
				if c, cerr := af.clientAt(cfg, cmd, fallback); cerr == nil {
					v, err = c.Move(ctx, cell, to)
				}
			}
			if err != nil {
				return &writeFailure{errcode.Wrap(err, "move %s", cell)}
			}
			if cfg.json {
				writeJSON(cfg.inv.Stdout, v)
			} else if v.From != "" {
				fmt.Fprintf(cfg.inv.Stdout, "moved cell %s from %s to %s (epoch %d, pinned there)\n", v.Cell, v.From, v.To, v.Epoch)
			} else {
				fmt.Fprintf(cfg.inv.Stdout, "cell %s claimed on %s (epoch %d, pinned there)\n", v.Cell, v.To, v.Epoch)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the node to move the cell to (a live node of the fleet, see deed nodes)")
	af.register(cmd)
	registerLeaseSecret(cmd, &secretFile)
	return cmd
}

func newDrainCmd(cfg *config) *cobra.Command {
	var (
		af         apiFlags
		off        bool
		waitDone   bool
		every      time.Duration
		secretFile string
	)
	cmd := &cobra.Command{
		Use:   "drain NODE",
		Short: "Make a node hand off every cell and take no new ones",
		Long: `drain tells NODE's daemon to drain (POST /v1/node/drain): it hands every cell
it holds to the cell's preferred node among the others (at most --move-rate
per second, as moves: nothing acknowledged is lost), claims no free cell (a
request for one is sent on to the node that will take it), and says so in
its node lease, so that peers leave it out of placement from its next
renewal on. The node keeps running and serving; stop it once it holds
nothing, or undo the drain with --off.

With no other live node a draining node keeps its cells (there is nowhere to
hand them).

NODE's address is read from its node lease, so drain needs --bucket and
--fleet-secret-file (the lease must verify under the fleet secret before the
request, and its bearer token, go to the address it names); --addr sends the
request to that daemon instead. --wait polls the daemon until it
holds no cell, printing how many are left.`,
		Example: `  deed drain web-3 --wait --token-file /etc/deed/token
  deed drain web-3 --off`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			node := args[0]
			if err := owner.ValidateName("node", node); err != nil {
				return err
			}
			if every <= 0 {
				return errcode.Errorf(errcode.CodeBadRequest, "--every %v: must be positive", every)
			}
			c, err := placementClient(ctx, cfg, cmd, &af, secretFile, func(b bucket.Bucket, key []byte) (string, error) { return nodeAddr(ctx, b, key, node) })
			if err != nil {
				return errcode.Wrap(err, "drain %s", node)
			}
			st, err := c.Drain(ctx, !off)
			if err != nil {
				return &writeFailure{errcode.Wrap(err, "drain %s", node)}
			}
			if st.Node != node {
				return errcode.Errorf(errcode.CodeBadRequest, "drain %s: the daemon there is node %s", node, st.Node)
			}
			if !cfg.json {
				if off {
					fmt.Fprintf(cfg.inv.Stdout, "node %s no longer drains (%d cells held)\n", node, st.Cells)
				} else {
					fmt.Fprintf(cfg.inv.Stdout, "node %s drains: %d cells to hand off\n", node, st.Cells)
				}
			}
			if waitDone && !off {
				last := st.Cells
				for last > 0 {
					if err := wait.Sleep(ctx, every); err != nil {
						return errcode.Errorf(errcode.CodeUnavailable, "drain %s: stopped waiting with %d cells left: %v", node, last, err)
					}
					held, err := c.Cells(ctx)
					if err != nil {
						return errcode.Wrap(err, "drain %s: poll", node)
					}
					if n := len(held.Cells); n != last {
						last = n
						if !cfg.json {
							fmt.Fprintf(cfg.inv.Stdout, "node %s: %d cells left\n", node, n)
						}
					}
				}
				st.Cells = 0
				if !cfg.json {
					fmt.Fprintf(cfg.inv.Stdout, "node %s is drained\n", node)
				}
			}
			if cfg.json {
				writeJSON(cfg.inv.Stdout, st)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&off, "off", false, "undo the drain: the node takes cells again")
	cmd.Flags().BoolVar(&waitDone, "wait", false, "wait until the node holds no cell")
	cmd.Flags().DurationVar(&every, "every", time.Second, "with --wait: how often to ask the daemon")
	af.register(cmd)
	registerLeaseSecret(cmd, &secretFile)
	return cmd
}

// unreached reports whether err says the daemon asked could not be reached
// at all (nothing sent, no answer): another node may be asked instead.
func unreached(err error) bool {
	var ce *client.Error
	return errors.As(err, &ce) && ce.Status == 0 && ce.Code == errcode.CodeUnavailable
}

// placementClient is the API client for a placement command: to --addr when
// given, else to the address find reads from the bucket.
//
// An address read from a node lease is believed only when the lease
// verifies under the fleet secret (--fleet-secret-file): anyone who can
// write the bucket can write a lease, and the request carries the bearer
// token. Without the secret, or for a lease that does not verify, the
// command refuses (DEED-E040) and names --addr as the other way.
func placementClient(ctx context.Context, cfg *config, cmd *cobra.Command, af *apiFlags, secretFile string, find func(b bucket.Bucket, key []byte) (string, error)) (*client.Client, error) {
	if cmd.Flags().Changed("addr") {
		return af.client(cfg, cmd)
	}
	if !cmd.Flags().Changed("fleet-secret-file") {
		secretFile = cfg.getenv(envFleetSecret)
	}
	if secretFile == "" {
		return nil, errcode.Errorf(errcode.CodeBadRequest, "finding the daemon from its node lease needs --fleet-secret-file (or %s), to verify the lease before the bearer token is sent to the address it names; or name the daemon with --addr", envFleetSecret)
	}
	secret, err := readFleetSecret(secretFile)
	if err != nil {
		return nil, err
	}
	b, _, err := cfg.openBucket(ctx)
	if err != nil {
		return nil, err
	}
	addr, err := find(b, owner.LeaseKey(secret))
	if err != nil {
		return nil, err
	}
	return af.clientAt(cfg, cmd, addr)
}

// nodeAddr is the address node advertises in its node lease (one GET of
// that lease), verified with key. DEED-E040 when there is no such lease,
// it is released (the node stopped), it does not verify (not a member of
// this fleet), or it has no address.
func nodeAddr(ctx context.Context, b bucket.Bucket, key []byte, node string) (string, error) {
	ob, err := owner.NewObserver(b, owner.Params{TTL: owner.DefaultTTL, Margin: owner.DefaultMargin}).VerifyWith(key).Observe(ctx, node)
	switch {
	case err != nil:
		return "", errcode.Wrap(err, "read the node lease of %s", node)
	case !ob.Exists:
		return "", errcode.Errorf(errcode.CodeBadRequest, "no node lease for node %s in this bucket (see deed nodes)", node)
	case ob.Released:
		return "", errcode.Errorf(errcode.CodeBadRequest, "node %s is not running (its node lease is released)", node)
	case !ob.Verified:
		return "", errcode.Errorf(errcode.CodeBadRequest, "the node lease of %s does not verify with this fleet secret: it is not a member, and nothing is sent to the address it names (%q); check --fleet-secret-file, or name a daemon you trust with --addr", node, ob.Addr)
	case ob.Addr == "":
		return "", errcode.Errorf(errcode.CodeBadRequest, "node %s advertises no address in its node lease: use --addr", node)
	}
	return ob.Addr, nil
}

// registerLeaseSecret adds --fleet-secret-file to a command that reads node
// leases and must tell members from leases anyone could have written.
func registerLeaseSecret(cmd *cobra.Command, file *string) {
	cmd.Flags().StringVar(file, "fleet-secret-file", "", "file with the fleet secret, to verify node leases (env "+envFleetSecret+")")
}
