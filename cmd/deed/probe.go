package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/bucket"
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
			rep, err := bucket.Probe(ctx, b, bucket.ProbeOptions{Prefix: prefix, Racers: racers})
			if len(rep.Checks) == 0 && err != nil {
				return err // rejected options: there is no report to show
			}
			rep.Bucket = cfg.describe(loc)
			if cfg.json {
				writeJSON(cfg.inv.Stdout, rep)
			} else {
				_ = rep.WriteText(cfg.inv.Stdout)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&prefix, "prefix", "", "scratch prefix inside the bucket; must be empty (default deed-probe/<random>)")
	f.IntVar(&racers, "racers", bucket.DefaultProbeRacers, "concurrent creates in the race check")
	f.DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long (0: no limit); cleanup runs regardless")
	return cmd
}
