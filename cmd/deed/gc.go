package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// gcView is one cell's GC report.
type gcView struct {
	Cell string `json:"cell"`
	// Snapshot is the newest snapshot, which GC keeps and bases every
	// decision on; "" when the cell has none (nothing is deleted).
	Snapshot string   `json:"snapshot"`
	Deleted  []string `json:"deleted"`
	Bytes    int64    `json:"bytes"`
	// Markers counts the seals and tombstones seen; they are never deleted.
	Markers int `json:"markers"`
	// Strays are keys under the cell's log prefix deed did not write:
	// ignored by every walk, never deleted, listed by --dry-run.
	Strays []string `json:"strays"`
	DryRun bool     `json:"dry_run"`
}

func newGCCmd(cfg *config) *cobra.Command {
	var (
		all        bool
		dryRun     bool
		dropWindow bool
	)
	cmd := &cobra.Command{
		Use:   "gc CELL|--all",
		Short: "Delete log files that a cell's newest snapshot makes redundant",
		Long: `gc deletes what a cell's newest snapshot makes redundant: every older
snapshot, and every record file at or below the snapshot's txid in a sealed
epoch. It never deletes a seal or a tombstone (they keep a paused owner
fenced forever), a file above the snapshot, or a record of an epoch that may
still be writing, and it keeps the record files of the idempotency window
(the last 10 minutes, at most 100,000 files), which a new owner reads to
learn the keys of recent appends; --drop-key-window deletes those too (a
retry of such an append may then be written again). A cell without a
snapshot is left alone. It is safe to run while the cell's owner writes.

--all runs it for every cell under cells/ (one after another; a cell that
fails does not stop the others, and the first failure sets the exit status).
--dry-run lists what would be deleted and deletes nothing, and lists the
stray keys under the cell's log prefix that deed did not write (ignored by
every read and walk; gc never deletes them).

With --json it prints one JSON object per cell and line:
{"cell","snapshot","deleted":[keys],"bytes","markers","strays":[keys],"dry_run"}.`,
		Example: `  deed gc orders --dry-run
  deed gc --all --json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if all == (len(args) == 1) {
				return errcode.Errorf(errcode.CodeBadRequest, "usage: deed gc CELL|--all [--dry-run]: name one cell or --all")
			}
			if !all {
				if err := cfg.validNames(false, args[0]); err != nil {
					return err
				}
			}
			b, _, err := cfg.openBucket(ctx)
			if err != nil {
				return err
			}
			opts := replication.GCOptions{DryRun: dryRun, DropKeyWindow: dropWindow}
			if !all {
				// A name that was never claimed is most likely a typo: say
				// so rather than report nothing to delete.
				if _, exists, err := owner.Inspect(ctx, b, args[0]); err != nil {
					return errcode.Wrap(err, "gc %s", args[0])
				} else if !exists {
					return errcode.Errorf(errcode.CodeBadRequest, "gc %s: no such cell: it was never claimed (see deed ls)", args[0])
				}
				return gcCell(ctx, cfg, b, args[0], opts)
			}
			var first error
			failed, total := 0, 0
			err = listCells(ctx, b, "", func(cells []string) error {
				for _, cell := range cells {
					total++
					if err := gcCell(ctx, cfg, b, cell, opts); err != nil {
						if ctx.Err() != nil {
							return err
						}
						failed++
						cfg.log.Error("gc failed", "cell", cell, "err", err)
						if first == nil {
							first = err
						}
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			if first != nil {
				return errcode.Wrap(first, "gc --all: %d of %d cells failed; the first", failed, total)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&all, "all", false, "collect every cell under cells/")
	f.BoolVar(&dryRun, "dry-run", false, "report what would be deleted; delete nothing")
	f.BoolVar(&dropWindow, "drop-key-window", false, "also delete the record files of the idempotency window (retries of their keys may then be written again)")
	return cmd
}

// gcCell collects one cell and prints its report.
func gcCell(ctx context.Context, cfg *config, b bucket.Bucket, cell string, opts replication.GCOptions) error {
	rep, err := replication.GC(ctx, b, cell, opts)
	if err != nil {
		return errcode.Wrap(err, "gc %s", cell)
	}
	v := gcView{Cell: cell, Snapshot: rep.Snapshot, Deleted: rep.Deleted, Bytes: rep.Bytes, Markers: rep.Markers, Strays: rep.Strays, DryRun: rep.DryRun}
	if v.Deleted == nil {
		v.Deleted = []string{}
	}
	if v.Strays == nil {
		v.Strays = []string{}
	}
	if cfg.json {
		writeJSON(cfg.inv.Stdout, v)
		return nil
	}
	w := cfg.inv.Stdout
	verb := "deleted"
	if opts.DryRun {
		verb = "would delete"
	}
	switch {
	case v.Snapshot == "":
		fmt.Fprintf(w, "%s: no snapshot, nothing to delete\n", cell)
	default:
		fmt.Fprintf(w, "%s: %s %d files (%d bytes) covered by %s; kept %d seals/tombstones\n", cell, verb, len(v.Deleted), v.Bytes, v.Snapshot, v.Markers)
		if opts.DryRun {
			for _, k := range v.Deleted {
				fmt.Fprintf(w, "  %s\n", k)
			}
		}
	}
	if opts.DryRun && len(v.Strays) > 0 {
		fmt.Fprintf(w, "%s: %d stray keys deed did not write (ignored, kept):\n", cell, len(v.Strays))
		for _, k := range v.Strays {
			fmt.Fprintf(w, "  %s\n", k)
		}
	}
	return nil
}
