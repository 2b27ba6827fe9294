package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/deedkit/deed/errcode"
)

func newAppendCmd(cfg *config) *cobra.Command {
	var af apiFlags
	cmd := &cobra.Command{
		Use:   "append CELL [DATA|-]",
		Short: "Append one record to a cell's log, through a running daemon",
		Long: `append sends one record to a running 'deed run' (POST /v1/cells/CELL/append)
and prints where it landed once it is durable: {"cell","epoch","txid","pos"}.
The record is DATA, or standard input with "-" or without DATA (all of it,
as one record, bytes unchanged). The daemon claims the cell first if no live
node holds it.

Errors are the daemon's, with the same codes and exit statuses: DEED-E020
(exit 4) when another live node holds the cell, DEED-E021 (exit 3) when the
daemon's lease was lost, DEED-E040 (exit 2) for a record over the daemon's
limit or an empty record, DEED-E041 (exit 2) for a missing or wrong token,
DEED-E011 (exit 1) when the daemon cannot be reached. The error says
whether the record was written: "applied: no" (nothing was written; a
retry cannot duplicate it) or, with DEED-E012 (exit 1), "applied: unknown"
(the daemon got the record but its outcome was not learned: read the log
before appending it again). With --json the error object has "applied".`,
		Example: `  deed append orders 'hello'
  echo '{"id":1}' | deed append orders --addr http://10.0.0.5:7480 --token "$DEED_TOKEN" --json`,
		Args: cobra.RangeArgs(1, 2),
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
			var data []byte
			if len(args) == 2 && args[1] != "-" {
				data = []byte(args[1])
			} else if data, err = readRecordFromStdin(cfg); err != nil {
				return errcode.Errorf(errcode.CodeBadRequest, "append %s: read standard input: %w", cell, err)
			}
			v, err := c.Append(ctx, cell, data)
			if err != nil {
				return &writeFailure{errcode.Wrap(err, "append %s", cell)}
			}
			if cfg.json {
				writeJSON(cfg.inv.Stdout, v)
			} else {
				fmt.Fprintf(cfg.inv.Stdout, "appended to %s at position %d (epoch %d, txid %d)\n", v.Cell, v.Pos, v.Epoch, v.TxID)
			}
			return nil
		},
	}
	af.register(cmd)
	return cmd
}

// readRecordFromStdin reads the record from standard input. On a terminal
// it first says so on stderr, which would otherwise look like a hang; from
// a pipe, a file or a device that is no terminal (/dev/null is a character
// device too) it is silent.
func readRecordFromStdin(cfg *config) ([]byte, error) {
	if f, ok := stdin.(*os.File); ok {
		if term.IsTerminal(int(f.Fd())) {
			fmt.Fprintln(cfg.inv.Stderr, "deed append: reading the record from standard input; end it with Ctrl-D (or pass DATA as an argument)")
		}
	}
	return io.ReadAll(stdin)
}
