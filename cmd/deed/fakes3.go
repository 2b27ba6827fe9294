package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
)

// defaultFakeBucket is the bucket `deed fakes3` creates when none is named.
const defaultFakeBucket = "deed"

func newFakes3Cmd(cfg *config) *cobra.Command {
	var (
		listen  string
		dir     string
		buckets []string
		ignore  bool
	)
	cmd := &cobra.Command{
		Use:   "fakes3",
		Short: "Serve a fake S3 store (for development and tests)",
		Long: `fakes3 serves an S3-compatible store on --listen until SIGINT or SIGTERM:
gofakes3 with the conditional writes deed needs (If-None-Match, If-Match on
PUT and DELETE, AWS's 404 for If-Match on a missing key). It keeps objects in
memory, or in DIR/fakes3.db with --dir. Credentials are not checked: any
access key and secret will do.

--bucket here names a bucket to create (repeatable; "s3://NAME/PREFIX" is
accepted and reduced to NAME). Without it, the bucket of DEED_BUCKET is
created, else "deed".

--ignore-conditions makes the server accept conditional headers and ignore
them, like a broken store: 'deed probe' against it fails with DEED-E010 and
exit status 5.`,
		Example: `  deed fakes3 --listen 127.0.0.1:9000 --dir ./deed-data
  deed fakes3 --listen 127.0.0.1:9001 --ignore-conditions`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			names, err := fakeBuckets(buckets, cfg.inv.Getenv)
			if err != nil {
				return err
			}
			srv, err := fakes3.NewServer(fakes3.ServerOptions{
				Dir:              dir,
				Buckets:          names,
				IgnoreConditions: ignore,
				Logger:           cfg.log,
			})
			if err != nil {
				return bucket.Wrap(err, "fakes3") // a damaged store file keeps its DEED-E032
			}
			url, err := srv.Start(listen)
			if err != nil {
				_ = srv.Close()
				return bucket.Wrap(err, "fakes3") // a damaged store file keeps its DEED-E032
			}
			printFakeBanner(cfg, url, dir, names, ignore)

			<-ctx.Done()
			cfg.log.Info("fakes3 shutting down", "url", url)
			if err := srv.Close(); err != nil {
				return bucket.Wrap(err, "fakes3") // a damaged store file keeps its DEED-E032
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:9000", "address to serve on (port 0 picks a free one)")
	f.StringVar(&dir, "dir", "", "persist objects under this directory (default: in memory)")
	// This local --bucket shadows the persistent one: here it names buckets
	// to create, not the one to use.
	f.StringArrayVar(&buckets, "bucket", nil, "bucket to create, repeatable (default: DEED_BUCKET's, else "+defaultFakeBucket+")")
	f.BoolVar(&ignore, "ignore-conditions", false, "accept and ignore If-Match/If-None-Match, like a broken store (the probe fails with DEED-E010)")
	return cmd
}

// bucketName is S3's rule for bucket names (3-63 of [a-z0-9.-], starting
// and ending with a letter or digit).
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// fakeBuckets turns --bucket values into bucket names to create.
func fakeBuckets(flags []string, getenv func(string) string) ([]string, error) {
	if len(flags) == 0 {
		if getenv != nil && getenv(envBucket) != "" {
			flags = []string{getenv(envBucket)}
		} else {
			flags = []string{defaultFakeBucket}
		}
	}
	var names []string
	for _, v := range flags {
		name := v
		if strings.HasPrefix(v, "s3://") {
			loc, err := bucket.ParseURL(v)
			if err != nil {
				return nil, bucket.Errorf(bucket.CodeBadRequest, "fakes3 --bucket: %w", err)
			}
			name = loc.Bucket
		}
		if !bucketName.MatchString(name) {
			return nil, bucket.Errorf(bucket.CodeBadRequest, "fakes3 --bucket %q: want a bucket name of 3-63 characters [a-z0-9.-]", v)
		}
		names = append(names, name)
	}
	return names, nil
}

// printFakeBanner tells the user how to point deed (or any S3 client) at the
// server.
func printFakeBanner(cfg *config, url, dir string, names []string, ignore bool) {
	env := [][2]string{
		{envEndpoint, url},
		{envBucket, "s3://" + names[0]},
		{"AWS_ACCESS_KEY_ID", "deed"},
		{"AWS_SECRET_ACCESS_KEY", "deed"},
		{envRegion, bucket.DefaultRegion},
	}
	if cfg.json {
		m := map[string]string{}
		for _, kv := range env {
			m[kv[0]] = kv[1]
		}
		writeJSON(cfg.inv.Stdout, map[string]any{
			"endpoint":          url,
			"buckets":           names,
			"dir":               dir,
			"ignore_conditions": ignore,
			"env":               m,
		})
		return
	}
	w := cfg.inv.Stdout
	store := "in memory"
	if dir != "" {
		store = "persisted in " + dir
	}
	fmt.Fprintf(w, "deed fakes3: serving %s (%s), buckets: %s\n", url, store, strings.Join(names, ", "))
	if ignore {
		fmt.Fprintf(w, "WARNING: --ignore-conditions: this server ignores If-Match/If-None-Match like a broken store;\n"+
			"         'deed probe' against it fails with %s (exit 5).\n", bucket.CodeContract)
	}
	fmt.Fprintf(w, "Use it from another shell (any access key and secret will do):\n")
	for _, kv := range env {
		fmt.Fprintf(w, "  export %s=%s\n", kv[0], kv[1])
	}
	fmt.Fprintf(w, "  deed probe\n")
	fmt.Fprintf(w, "Stop with Ctrl-C.\n")
}
