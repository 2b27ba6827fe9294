package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/bucket/probe"
	"github.com/deedkit/deed/errcode"
)

func newProbeCmd(cfg *config) *cobra.Command {
	var (
		prefix  string
		racers  int
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "probe",
		Short: "Check that the bucket honours conditional writes",
		Long: `probe checks, in a scratch prefix of the bucket, that the store honours the
conditional writes deed depends on: create-only (If-None-Match: *), update
with the current ETag (If-Match), refusal of a stale ETag, If-Match on a
missing key (404 as AWS, or 412), conditional DELETE (a warning if
unsupported), ETag agreement across PUT/GET/HEAD/LIST, and a race of
concurrent creates of one key with exactly one winner. It deletes every key
it wrote, and lists the scratch prefix to make sure.

Exit status: 0 when the store passes (warnings are printed), 5 with
DEED-E010 when it breaks the contract (deed must not run on it), 1 with
DEED-E011 when a store error kept the probe from concluding, 2 for bad
configuration or credentials.`,
		Example: `  deed probe --bucket s3://my-bucket/deed
  deed probe --bucket s3://my-bucket --endpoint https://ACCOUNT.r2.cloudflarestorage.com
  deed probe --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			b, loc, err := cfg.openBucket(ctx)
			if err != nil {
				return err
			}
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			cfg.log.Debug("probe starting", "bucket", loc.String(), "prefix", prefix, "racers", racers)
			rep, err := probe.Run(ctx, b, probe.Options{Prefix: prefix, Racers: racers})
			if len(rep.Checks) == 0 && err != nil {
				return err // rejected options: there is no report to show
			}
			rep.Bucket = cfg.describe(loc)
			if cfg.json {
				writeJSON(cfg.inv.Stdout, rep)
			} else if werr := writeProbeText(cfg.inv.Stdout, rep); err == nil && werr != nil {
				return errcode.Errorf(errcode.CodeOutput, "the probe ran, but its report could not be written: %w", werr)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&prefix, "prefix", "", "scratch prefix inside the bucket; must be empty (default deed-probe/<random>)")
	f.IntVar(&racers, "racers", probe.DefaultRacers, "concurrent creates in the race check")
	f.DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long (0: no limit); cleanup runs regardless")
	return cmd
}

// writeProbeText prints a probe report for humans: one line per check, then
// the verdict. It writes nothing about how to exit; the caller maps the
// error.
func writeProbeText(w io.Writer, r probe.Report) error {
	var b strings.Builder
	target := r.Bucket
	if target == "" {
		target = "bucket"
	}
	fmt.Fprintf(&b, "deed probe: %s (scratch prefix %s, %d racers)\n", target, r.Prefix, r.Racers)
	width := 0
	for _, c := range r.Checks {
		width = max(width, len(c.Name))
	}
	for _, c := range r.Checks {
		status := "PASS"
		switch {
		case !c.OK && c.Inconclusive:
			status = "ERR "
		case !c.OK:
			status = "FAIL"
		case c.Warning:
			status = "WARN"
		}
		fmt.Fprintf(&b, "  %s  %-*s  %8s  %s\n", status, width, c.Name, fmtDuration(c.Duration), c.Detail)
	}
	q := r.Quirks
	imm := "not observed"
	if q.IfMatchMissingStatus != 0 {
		imm = fmt.Sprint(q.IfMatchMissingStatus)
	}
	fmt.Fprintf(&b, "quirks: if-match on missing key -> %s; conditional delete: %s; list after write: %s; quoted etags: %s",
		imm, yesNo(q.ConditionalDelete), yesNo(q.ListAfterWrite), yesNo(q.QuotedETags))
	if len(q.Observed) > 0 {
		fmt.Fprintf(&b, " (quirks table: %s)", strings.Join(q.Observed, ", "))
	}
	b.WriteString("\n")
	switch r.Verdict {
	case probe.VerdictPass:
		fmt.Fprintf(&b, "verdict: PASS in %s: the store honours conditional writes\n", fmtDuration(r.Duration))
	case probe.VerdictWarn:
		fmt.Fprintf(&b, "verdict: PASS with %d warning(s) in %s: the store honours conditional writes\n", r.Warnings(), fmtDuration(r.Duration))
	case probe.VerdictFail:
		fmt.Fprintf(&b, "verdict: FAIL (%s): the store does not honour conditional writes; deed must not use it\n", r.Code)
	default:
		fmt.Fprintf(&b, "verdict: ERROR (%s): the probe could not finish: %s\n", r.Code, r.Error)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func yesNo(v bool) string {
	if v {
		return "yes"
	}
	return "no"
}

func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}
