package main

import (
	"context"
	"fmt"
	"sync"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
)

// lsRow is one cell in ls's output.
type lsRow struct {
	Cell     string `json:"cell"`
	Node     string `json:"node"`
	Epoch    uint64 `json:"epoch"`
	Released bool   `json:"released"`
	// Claimed is false for a cell with files but no ownership record.
	Claimed bool `json:"claimed"`
	// Error is set (DEED-E030) for a record that does not parse.
	Error string `json:"error,omitempty"`
}

// lsConcurrency bounds the record reads in flight for one page of cells.
const lsConcurrency = 16

func newLsCmd(cfg *config) *cobra.Command {
	var prefix string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List cells and their ownership records",
		Long: `ls lists the cells under cells/ (a LIST with delimiter "/", page by page,
so the cost is one entry per cell however much data it holds) and reads each
cell's ownership record: node, epoch, released.

With --json it prints one JSON object per line:
{"cell","node","epoch","released","claimed"}, plus "error" for a record that
does not parse (the listing goes on). Liveness is not judged here: see
'deed show' and 'deed nodes'.`,
		Example: `  deed ls
  deed ls --prefix tenant- --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := validPrefix(prefix); err != nil {
				return err
			}
			b, _, err := cfg.openBucket(ctx)
			if err != nil {
				return err
			}
			var tw *tabwriter.Writer
			if !cfg.json {
				tw = tabwriter.NewWriter(cfg.inv.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "CELL\tNODE\tEPOCH\tSTATE")
			}
			err = listCells(ctx, b, prefix, func(cells []string) error {
				rows, err := readRecords(ctx, b, cells)
				if err != nil {
					return err
				}
				for _, r := range rows {
					if cfg.json {
						writeJSON(cfg.inv.Stdout, r)
						continue
					}
					node, state := r.Node, "held"
					switch {
					case r.Error != "":
						node, state = "-", r.Error
					case !r.Claimed:
						node, state = "-", "no record"
					case r.Released:
						node, state = "-", "released"
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", r.Cell, node, r.Epoch, state)
				}
				if tw != nil {
					return tw.Flush()
				}
				return nil
			})
			if tw != nil {
				if ferr := tw.Flush(); err == nil {
					err = ferr
				}
			}
			return err
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "only cells whose names start with this")
	return cmd
}

// readRecords reads the ownership records of cells, a few at a time, and
// returns them in the order given.
func readRecords(ctx context.Context, b bucket.Bucket, cells []string) ([]lsRow, error) {
	rows := make([]lsRow, len(cells))
	errs := make([]error, len(cells))
	sem := make(chan struct{}, lsConcurrency)
	var wg sync.WaitGroup
	for i, cell := range cells {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rec, exists, err := owner.Inspect(ctx, b, cell)
			rows[i] = lsRow{Cell: cell, Node: rec.Node, Epoch: rec.Epoch, Released: exists && rec.Released(), Claimed: exists}
			switch {
			case errcode.CodeOf(err) == errcode.CodeCorruptOwner:
				rows[i].Claimed, rows[i].Error = true, err.Error()
			case err != nil:
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return rows, nil
}
