package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
)

// showView is what show prints.
type showView struct {
	Cell     string `json:"cell"`
	Node     string `json:"node"`
	Epoch    uint64 `json:"epoch"`
	Released bool   `json:"released"`
	Claimed  bool   `json:"claimed"`
	// OwnerAlive is the takeover rule applied to one look at the owner's
	// node lease: true when it exists and is not marked released.
	OwnerAlive bool   `json:"owner_alive"`
	OwnerAddr  string `json:"owner_addr"`
	// ObservedForMS is how long the owner's lease was watched: one look,
	// so about the time of one GET.
	ObservedForMS int64 `json:"observed_for_ms"`
}

func newShowCmd(cfg *config) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show CELL",
		Short: "Show a cell's ownership record and whether its owner looks alive",
		Long: `show reads cells/CELL/own.json and the owner's node lease and prints
{"cell","node","epoch","released","claimed","owner_alive","owner_addr","observed_for_ms"}.
A cell never claimed prints claimed:false (exit 0); a corrupt record is
DEED-E030, exit 1.

owner_alive comes from one observation: the owner's node lease exists and is
not marked released. One look cannot tell a renewing node from a dead one
(a node is dead only once its lease was seen unchanged for TTL+margin), so a
crashed owner shows as alive until its lease is released or deleted; watch
it with 'deed nodes --watch DUR' to judge staleness. A claim of a cell whose
owner is released or has no node lease (a one-shot 'deed claim') succeeds
at once.`,
		Example: `  deed show tenant-42
  deed show tenant-42 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cell := args[0]
			if err := cfg.validNames(false, cell); err != nil {
				return err
			}
			b, _, err := cfg.openBucket(ctx)
			if err != nil {
				return err
			}
			rec, exists, err := owner.Inspect(ctx, b, cell)
			if err != nil {
				return errcode.Wrap(err, "show %s", cell)
			}
			v := showView{Cell: cell, Node: rec.Node, Epoch: rec.Epoch, Released: exists && rec.Released(), Claimed: exists}
			if exists && !rec.Released() {
				p := owner.Params{TTL: owner.DefaultTTL, Margin: owner.DefaultMargin}
				ob, err := owner.NewObserver(b, p).Observe(ctx, rec.Node)
				if err != nil {
					return errcode.Wrap(err, "show %s", cell)
				}
				v.OwnerAlive = owner.Alive(ob, time.Now(), p)
				v.OwnerAddr = ob.Addr
				v.ObservedForMS = time.Since(ob.FirstSeen).Milliseconds()
			}
			if cfg.json {
				writeJSON(cfg.inv.Stdout, v)
				return nil
			}
			w := cfg.inv.Stdout
			switch {
			case !v.Claimed:
				fmt.Fprintf(w, "cell %s: never claimed\n", cell)
			case v.Released:
				fmt.Fprintf(w, "cell %s: released at epoch %d (any node can claim it at once)\n", cell, v.Epoch)
			default:
				state := "alive as far as one look can tell (node lease present)"
				if !v.OwnerAlive {
					state = "dead (no node lease, or released): any node can take the cell over at once"
				}
				addr := v.OwnerAddr
				if addr == "" {
					addr = "unknown address"
				}
				fmt.Fprintf(w, "cell %s: held by node %s (%s) at epoch %d\nowner: %s\n", cell, v.Node, addr, v.Epoch, state)
			}
			return nil
		},
	}
	return cmd
}
