package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/errcode"
)

func newTailCmd(cfg *config) *cobra.Command {
	var (
		af     apiFlags
		after  uint64
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "tail CELL",
		Short: "Show where a cell's log ends, or follow it, through a running daemon",
		Long: `tail prints where CELL's log ends, as its holder answers after a barrier
(GET /v1/cells/CELL/tail, linearizable): "next_pos=N epoch=E node=NODE ts=MS",
or with --json {"cell","next_pos","epoch","node","ts"}. Without a fleet the
daemon asked must hold the cell (else DEED-E024, exit 4, naming who does).

-f (--follow) prints every record committed from then on, as it is committed
(long polling: GET …/records?wait=), one line "<pos>TAB<data>" each (with
--json one JSON object per line), each once and in order, and resumes by
itself when a node or the store fails for a moment or the cell moves, until
interrupted (SIGINT/SIGTERM end it with exit 0). It starts at the log's end,
or after --after P (0: from the start).`,
		Example: `  deed tail orders
  deed tail orders -f
  deed tail orders -f --after 0 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cell := args[0]
			if err := cfg.validNames(false, cell); err != nil {
				return err
			}
			c, err := af.client(cfg, cmd)
			if err != nil {
				return err
			}
			if !follow {
				if cmd.Flags().Changed("after") {
					return errcode.Errorf(errcode.CodeBadRequest, "--after goes with -f (deed read prints the records after a position)")
				}
				t, err := c.Tail(ctx, cell)
				if err != nil {
					return errcode.Wrap(err, "tail %s", cell)
				}
				if cfg.json {
					writeJSON(cfg.inv.Stdout, t)
				} else {
					fmt.Fprintf(cfg.inv.Stdout, "next_pos=%d epoch=%d node=%s ts=%d\n", t.NextPos, t.Epoch, t.Node, t.TS)
				}
				return nil
			}
			if !cmd.Flags().Changed("after") {
				t, err := c.Tail(ctx, cell)
				if err != nil {
					return errcode.Wrap(err, "tail %s", cell)
				}
				after = t.NextPos - 1
			}
			for r, err := range c.Follow(ctx, cell, after) {
				if err != nil {
					return errcode.Wrap(err, "tail -f %s", cell)
				}
				if cfg.json {
					writeJSON(cfg.inv.Stdout, r)
				} else {
					fmt.Fprintf(cfg.inv.Stdout, "%d\t%s\n", r.Pos, r.Data)
				}
			}
			return nil // interrupted
		},
	}
	af.register(cmd)
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "print each record as it is committed, until interrupted")
	f.Uint64Var(&after, "after", 0, "with -f: start after this position (0: from the start; default: the log's end)")
	return cmd
}

func newSnapshotCmd(cfg *config) *cobra.Command {
	var (
		af   apiFlags
		upTo uint64
	)
	cmd := &cobra.Command{
		Use:   "snapshot CELL --upto POS FILE",
		Short: "Write a snapshot of a cell's state, through a running daemon",
		Long: `snapshot writes FILE ("-": standard input) as the snapshot of CELL covering
every record up to and including position --upto (PUT
/v1/cells/CELL/snapshot?upto=POS), by the cell's holder. POS must be committed
and the last record of its transaction (a batch is covered whole); the file
must fit the daemon's --max-body. A new owner's restore and 'deed gc' start
from the newest snapshot. It prints "snapshot CELL up to POS (epoch E, txid
T)", or with --json {"cell","epoch","txid","pos"}.`,
		Example: `  deed snapshot orders --upto 1000 state.bin`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cell, file := args[0], args[1]
			if err := cfg.validNames(false, cell); err != nil {
				return err
			}
			if upTo == 0 {
				return errcode.Errorf(errcode.CodeBadRequest, "--upto: want the last position the snapshot covers (1 or more)")
			}
			var state []byte
			var err error
			if file == "-" {
				state, err = io.ReadAll(stdin)
			} else {
				state, err = os.ReadFile(file)
			}
			if err != nil {
				return errcode.Errorf(errcode.CodeBadRequest, "snapshot %s: read %s: %w", cell, file, err)
			}
			c, err := af.client(cfg, cmd)
			if err != nil {
				return err
			}
			res, err := c.PutSnapshot(ctx, cell, upTo, state)
			if err != nil {
				return errcode.Wrap(err, "snapshot %s", cell)
			}
			if cfg.json {
				writeJSON(cfg.inv.Stdout, res)
			} else {
				fmt.Fprintf(cfg.inv.Stdout, "snapshot %s up to %d (epoch %d, txid %d)\n", res.Cell, res.Pos, res.Epoch, res.TxID)
			}
			return nil
		},
	}
	af.register(cmd)
	cmd.Flags().Uint64Var(&upTo, "upto", 0, "the last position the snapshot covers (required)")
	return cmd
}
