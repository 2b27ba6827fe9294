package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/internal/wait"
)

// readPage is how many records read asks the daemon for at a time: the
// daemon's default page, which every --max-limit of 100 or more accepts.
const readPage = 100

func newReadCmd(cfg *config) *cobra.Command {
	var (
		af      apiFlags
		after   uint64
		limit   int
		barrier bool
		follow  bool
		poll    time.Duration
		retry   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "read CELL",
		Short: "Read a cell's records, through a running daemon",
		Long: `read prints the records of CELL's log after position --after (0: from the
start), in order, through a running 'deed run' (GET /v1/cells/CELL/records,
page by page). Each record is one line "<pos>TAB<data>" with the data as
stored (a record that contains newlines spans several lines), or with --json
one JSON object per line: {"pos","epoch","txid","data"} with data in base64.

--limit N stops after N records (0: no limit). --barrier makes each page a
linearizable read by the owner: it fails with DEED-E024 (exit 4) when the
daemon does not hold the cell, and with DEED-E021 (exit 3) when a newer epoch
has fenced it. --follow keeps polling every --poll for new records until
interrupted (SIGINT/SIGTERM end it with exit 0). A refusal a retry can cure
(the store or the holder unreachable, the cell moving: DEED-E011, E013,
E025) is retried with backoff for up to --retry-for (0: each page is asked
once); a read never writes, so a retry cannot duplicate anything.

A cell that was never claimed has no log: read says so with DEED-E040 (exit
2), so a mistyped cell name is not mistaken for an empty log. (--follow
waits for its first record instead.)`,
		Example: `  deed read orders
  deed read orders --after 100 --limit 10 --json
  deed read orders --follow --poll 500ms`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cell := args[0]
			if err := cfg.validNames(false, cell); err != nil {
				return err
			}
			if limit < 0 || poll <= 0 || retry < 0 {
				return errcode.Errorf(errcode.CodeBadRequest, "--limit and --retry-for must not be negative and --poll must be positive")
			}
			af.retryFor = retry
			if retry == 0 {
				af.retryFor = -1
			}
			c, err := af.client(cfg, cmd)
			if err != nil {
				return err
			}
			printed, first := 0, true
			for limit == 0 || printed < limit {
				n := readPage
				if limit > 0 {
					n = min(n, limit-printed)
				}
				ans, err := c.Read(ctx, cell, client.ReadOptions{After: after, Limit: n, Barrier: barrier})
				if err != nil {
					if follow && ctx.Err() != nil {
						return nil // interrupted while following
					}
					return errcode.Wrap(err, "read %s", cell)
				}
				if first && len(ans.Records) == 0 && !follow {
					if err := neverClaimed(ctx, c, cell); err != nil {
						return err
					}
				}
				first = false
				for _, r := range ans.Records {
					if cfg.json {
						writeJSON(cfg.inv.Stdout, r)
					} else {
						fmt.Fprintf(cfg.inv.Stdout, "%d\t%s\n", r.Pos, r.Data)
					}
					after = r.Pos
					printed++
				}
				if len(ans.Records) < n {
					// The end of the chain, for now.
					if !follow {
						return nil
					}
					if wait.Sleep(ctx, poll) != nil {
						return nil
					}
				}
			}
			return nil
		},
	}
	af.register(cmd)
	f := cmd.Flags()
	f.Uint64Var(&after, "after", 0, "print records after this position (0: from the start)")
	f.IntVar(&limit, "limit", 0, "stop after this many records (0: no limit)")
	f.BoolVar(&barrier, "barrier", false, "linearizable read by the owner (the daemon must hold the cell)")
	f.BoolVar(&follow, "follow", false, "keep polling for new records until interrupted")
	f.DurationVar(&poll, "poll", time.Second, "how often --follow asks for new records")
	f.DurationVar(&retry, "retry-for", client.DefaultRetryFor, "how long to retry a page whose refusal a retry can cure (0: ask once)")
	return cmd
}

// neverClaimed asks the daemon whether cell was ever claimed, and fails
// with DEED-E040 if it was not: an empty read of a cell with no log at all
// is far more often a mistyped name than a fact worth printing nothing for.
func neverClaimed(ctx context.Context, c *client.Client, cell string) error {
	v, err := c.Cell(ctx, cell)
	if err != nil {
		return errcode.Wrap(err, "read %s", cell)
	}
	if !v.Claimed {
		return errcode.Errorf(errcode.CodeBadRequest, "read %s: cell %s was never claimed, so it has no log (check the name; 'deed ls' lists the cells)", cell, cell)
	}
	return nil
}
