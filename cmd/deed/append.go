package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
)

func newAppendCmd(cfg *config) *cobra.Command {
	var (
		af       apiFlags
		key      string
		matchPos uint64
		batch    string
		format   string
		retryFor time.Duration
	)
	cmd := &cobra.Command{
		Use:   "append CELL [DATA|-]",
		Short: "Append a record (or a batch) to a cell's log, exactly once, through a running daemon",
		Long: `append sends one record to a running 'deed run' (POST /v1/cells/CELL/append)
and prints where it landed once it is durable: {"cell","epoch","txid","pos","ts"}.
The record is DATA, or standard input with "-" or without DATA (all of it,
as one record, bytes unchanged). The daemon claims the cell first if no live
node holds it.

Exactly once: the append carries an idempotency key (--key, or a fresh one),
and when its outcome is unknown or the refusal is one a retry can cure (the
store or the holder unreachable, the cell changing hands) it is sent again
with the same key, for up to --retry-for: a retry of an append that landed
is answered with the first answer ("replayed") and writes nothing. So the
exit status is 0 once the outcome is known. Give the same --key to a later
'deed append' to make that one a retry too (within the daemon's idempotency
window, 10 minutes by default).

--match-pos N appends only if the record gets position N (the log's next):
otherwise DEED-E044 (exit 6), nothing written, and the error names the next
position. --batch FILE appends every line of FILE ("-": standard input) as
one record each, atomically (one transaction, contiguous positions; 1 to
4096 records): {"cell","epoch","txid","first_pos","last_pos","ts"}. With
--batch-format jsonl every line must be a JSON value.

Errors are the daemon's, with the same codes and exit statuses: DEED-E020
(exit 4) when another live node holds the cell, DEED-E040 (exit 2) for a
record over the daemon's limit or an empty record, DEED-E041 (exit 2) for a
missing or wrong token, DEED-E043 (exit 2) when --key was used for other
data, DEED-E011 (exit 1) when the daemon could not be reached within
--retry-for. The error says whether the record was written: "applied: no"
(nothing was written) or, with DEED-E012 (exit 1), "applied: unknown" (time
ran out with an attempt's outcome unknown: run the same command, with the
same --key, to learn it). With --json the error object has "applied".`,
		Example: `  deed append orders 'hello'
  deed append orders --key order-17 '{"id":17}'      # safe to run again
  deed append orders --match-pos 42 'only at 42'
  deed append orders --batch events.jsonl --batch-format jsonl
  echo '{"id":1}' | deed append orders --addr http://10.0.0.5:7480 --token "$DEED_TOKEN" --json`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cell := args[0]
			if err := cfg.validNames(false, cell); err != nil {
				return err
			}
			if retryFor < 0 {
				return errcode.Errorf(errcode.CodeBadRequest, "--retry-for %v: want 0 (send once) or more", retryFor)
			}
			af.retryFor = retryFor
			if retryFor == 0 {
				af.retryFor = -1
			}
			opts := client.AppendOptions{Key: key, MatchPos: matchPos}
			if cmd.Flags().Changed("match-pos") && matchPos == 0 {
				return errcode.Errorf(errcode.CodeBadRequest, "--match-pos 0: positions start at 1")
			}
			c, err := af.client(cfg, cmd)
			if err != nil {
				return err
			}
			if batch != "" {
				if len(args) == 2 {
					return errcode.Errorf(errcode.CodeBadRequest, "append %s: DATA and --batch both given", cell)
				}
				recs, err := readBatch(batch, format)
				if err != nil {
					return errcode.Wrap(err, "append %s: --batch %s", cell, batch)
				}
				v, err := c.AppendBatch(ctx, cell, recs, opts)
				if err != nil {
					return &writeFailure{errcode.Wrap(err, "append %s", cell)}
				}
				if cfg.json {
					writeJSON(cfg.inv.Stdout, struct {
						client.BatchResult
						Records  int  `json:"records"`
						Replayed bool `json:"replayed,omitempty"`
					}{v, len(recs), v.Replayed})
				} else {
					fmt.Fprintf(cfg.inv.Stdout, "appended %d records to %s at positions %d..%d (epoch %d, txid %d)%s\n", len(recs), v.Cell, v.FirstPos, v.LastPos, v.Epoch, v.TxID, replayedNote(v.Replayed))
				}
				return nil
			}
			var data []byte
			if len(args) == 2 && args[1] != "-" {
				data = []byte(args[1])
			} else if data, err = readRecordFromStdin(cfg); err != nil {
				return errcode.Errorf(errcode.CodeBadRequest, "append %s: read standard input: %w", cell, err)
			}
			v, err := c.AppendWith(ctx, cell, data, opts)
			if err != nil {
				return &writeFailure{errcode.Wrap(err, "append %s", cell)}
			}
			if cfg.json {
				writeJSON(cfg.inv.Stdout, struct {
					client.AppendResult
					Replayed bool `json:"replayed,omitempty"`
				}{v, v.Replayed})
			} else {
				fmt.Fprintf(cfg.inv.Stdout, "appended to %s at position %d (epoch %d, txid %d)%s\n", v.Cell, v.Pos, v.Epoch, v.TxID, replayedNote(v.Replayed))
			}
			return nil
		},
	}
	af.register(cmd)
	cmd.Flags().StringVar(&key, "key", "", "idempotency key (1-255 printable ASCII): an append with a key that landed already is answered with its first result, nothing written (default: a fresh key per run)")
	cmd.Flags().Uint64Var(&matchPos, "match-pos", 0, "append only if the (first) record gets this position, the log's next; else DEED-E044, exit 6")
	cmd.Flags().StringVar(&batch, "batch", "", "append every line of this file (\"-\": standard input) as one record each, atomically")
	cmd.Flags().StringVar(&format, "batch-format", "lines", "lines (each line a record) or jsonl (each line a JSON value, checked)")
	cmd.Flags().DurationVar(&retryFor, "retry-for", client.DefaultRetryFor, "how long to retry, with the same key, an append whose outcome is unknown or whose refusal a retry can cure (0: send once)")
	return cmd
}

func replayedNote(replayed bool) string {
	if replayed {
		return " (replayed: an earlier append with this key landed there; nothing written now)"
	}
	return ""
}

// readBatch reads a batch file: one record per line (its newline, and a
// CR before it, removed), lines checked as JSON values with format jsonl.
// An empty line is refused: a record has at least one byte.
func readBatch(path, format string) ([][]byte, error) {
	if format != "lines" && format != "jsonl" {
		return nil, errcode.Errorf(errcode.CodeBadRequest, "--batch-format %q: want lines or jsonl", format)
	}
	var r io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, errcode.Errorf(errcode.CodeBadRequest, "%v", err)
		}
		defer f.Close()
		r = f
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var recs [][]byte
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
		if len(line) == 0 {
			return nil, errcode.Errorf(errcode.CodeBadRequest, "line %d is empty: a record must have at least one byte", n)
		}
		if format == "jsonl" && !json.Valid(line) {
			return nil, errcode.Errorf(errcode.CodeBadRequest, "line %d is not a JSON value", n)
		}
		recs = append(recs, bytes.Clone(line))
	}
	if err := sc.Err(); err != nil {
		return nil, errcode.Errorf(errcode.CodeBadRequest, "read: %v", err)
	}
	if len(recs) == 0 {
		return nil, errcode.Errorf(errcode.CodeBadRequest, "no records")
	}
	return recs, nil
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
