package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
)

func newTrimCmd(cfg *config) *cobra.Command {
	var (
		af       apiFlags
		before   uint64
		pastSnap bool
	)
	cmd := &cobra.Command{
		Use:   "trim CELL --before POS",
		Short: "Stop serving a cell's records below a position, through a running daemon",
		Long: `trim raises CELL's trim point to --before (POST
/v1/cells/CELL/trim?before=POS), by the cell's holder: records at positions
below it are no longer served (a read that starts below it is refused with
DEED-E046, naming the first position served), and the holder deletes, in the
background and at a bounded rate, the record files wholly below it that the
newest snapshot covers in a sealed epoch (seals and tombstones are never
deleted). The point is durable and never moves back: a lower --before changes
nothing and prints the point in effect.

POS may not pass the committed tail (the log's next position), nor, without
--past-snapshot, the newest snapshot's successor (the first position no
snapshot covers): write a snapshot first (deed snapshot), or pass
--past-snapshot to stop serving records no snapshot covers (their files are
kept until a snapshot covers them). Either refusal is DEED-E040, nothing
trimmed.

It prints "trim CELL before POS (epoch E)", or with --json
{"cell","before","epoch"}.`,
		Example: `  deed snapshot orders --upto 1000 state.bin && deed trim orders --before 1001
  deed trim events --before 5000 --past-snapshot`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cell := args[0]
			if err := cfg.validNames(false, cell); err != nil {
				return err
			}
			if !cmd.Flags().Changed("before") {
				return errcode.Errorf(errcode.CodeBadRequest, "trim %s: --before is required: the first position still to be served", cell)
			}
			c, err := af.client(cfg, cmd)
			if err != nil {
				return err
			}
			res, err := c.Trim(cmd.Context(), cell, before, client.TrimOptions{PastSnapshot: pastSnap})
			if err != nil {
				return errcode.Wrap(err, "trim %s", cell)
			}
			if cfg.json {
				writeJSON(cfg.inv.Stdout, res)
			} else {
				fmt.Fprintf(cfg.inv.Stdout, "trim %s before %d (epoch %d)\n", res.Cell, res.Before, res.Epoch)
			}
			return nil
		},
	}
	af.register(cmd)
	cmd.Flags().Uint64Var(&before, "before", 0, "the first position still served: records below it are trimmed (required)")
	cmd.Flags().BoolVar(&pastSnap, "past-snapshot", false, "let the trim point pass the newest snapshot's successor (records no snapshot covers stop being served)")
	return cmd
}
