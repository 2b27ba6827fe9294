package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
)

// releaseView is what release prints: the same shape as the daemon's
// POST /v1/cells/{cell}/release.
type releaseView struct {
	Cell     string `json:"cell"`
	Node     string `json:"node"`
	Epoch    uint64 `json:"epoch"`
	Released bool   `json:"released"`
}

func newReleaseCmd(cfg *config) *cobra.Command {
	var (
		force  bool
		asNode string
	)
	cmd := &cobra.Command{
		Use:   "release CELL",
		Short: "Release a cell held by --node (or --as-node), directly against the bucket",
		Long: `release writes CELL's ownership record as released ({"node":""}, same epoch)
with a conditional write, so that any node can claim it at once. It refuses
with DEED-E024, exit 4, when --node is not the holder; --force releases it
whoever holds it (an operator action: the holder is cut off, and learns it at
its next write or, for exec and claim --hold, within TTL/3). Releasing a
released cell is a no-op; a cell never claimed is DEED-E024.

--node names a holder that is not running (a node that died, or a one-shot
claim under that id); there is no default, and DEED_NODE is not read. A
--node whose node lease shows a live process (a running daemon, exec or
claim --hold) is refused with DEED-E020: releasing under its id would cut
it off. --as-node NODE says that is meant: it releases the cell if NODE
holds it, running or not.

This only rewrites the record. A daemon that holds the cell should release
it through its API (POST /v1/cells/CELL/release), which seals its log first
so the next owner starts without walking the chain.`,
		Example: `  deed release tenant-42 --node web-1
  deed release tenant-42 --as-node web-1
  deed release tenant-42 --force --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cell := args[0]
			asLive, err := cfg.ownIdentity(cmd, identityCLI, asNode)
			if err != nil {
				return err
			}
			if err := cfg.validNames(true, cell); err != nil {
				return err
			}
			b, _, err := cfg.openBucket(ctx)
			if err != nil {
				return err
			}
			if cfg.nodeSet && !asLive && !force {
				if err := refuseLiveNode(ctx, b, cfg.node, releaseAsLiveHint(cfg.node)); err != nil {
					return errcode.Wrap(err, "release %s", cell)
				}
			}
			rec, err := owner.ReleaseCell(ctx, b, cell, cfg.node, force)
			if errcode.CodeOf(err) == errcode.CodeNotHolder && rec.Node != "" {
				// Held by another id: say how to release as that id.
				return errcode.Errorf(errcode.CodeNotHolder, "%s; to release it as its holder pass --node %s (--%s %s if that node is running), or --force to release it whoever holds it",
					strings.TrimPrefix(err.Error(), string(errcode.CodeNotHolder)+" "), rec.Node, asNodeFlag, rec.Node)
			}
			if err != nil {
				return err
			}
			v := releaseView{Cell: cell, Node: "", Epoch: rec.Epoch, Released: true}
			if cfg.json {
				writeJSON(cfg.inv.Stdout, v)
			} else {
				fmt.Fprintf(cfg.inv.Stdout, "released cell %s at epoch %d\n", cell, rec.Epoch)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "release the cell even if another node holds it (operator action)")
	cmd.Flags().StringVar(&asNode, asNodeFlag, "", "act as NODE although a live process runs under that id (a daemon): release the cell if NODE holds it, cutting it off")
	return cmd
}
