package main

import (
	"fmt"
	"net"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

// defaultFakeBucket is the bucket `deed fakes3` creates when none is named.
const defaultFakeBucket = "deed"

// The AWS SDK's credential variables, which a deed store's banner tells the
// user to export.
const (
	envAccessKeyID     = "AWS_ACCESS_KEY_ID"
	envSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
)

func newFakes3Cmd(cfg *config) *cobra.Command {
	var (
		listen  string
		dir     string
		buckets []string
		ignore  bool
		noAuth  bool
	)
	cmd := &cobra.Command{
		Use:   "fakes3",
		Short: "Serve a fake S3 store (for development and tests)",
		Long: `fakes3 serves an S3-compatible store on --listen until SIGINT or SIGTERM:
gofakes3 with the conditional writes deed needs (If-None-Match, If-Match on
PUT and DELETE, AWS's 404 for If-Match on a missing key). It keeps objects in
memory, or in DIR/fakes3.db with --dir.

Every request must be signed (AWS Signature V4) with the store's own
credentials: generated at first start and kept in DIR/credentials.env
(mode 0600; load them with '. DIR/credentials.env'), or, in memory, new at
every start. The banner prints them as environment variables to export.
--no-auth serves an open store instead (anyone who can reach the port reads
and writes every key), for tests that want one.

--listen must be a loopback address: the store speaks plain HTTP, and its
credentials and objects would cross the network in the clear. Use a real
S3-compatible store to share a bucket between machines.

--bucket here names a bucket to create (repeatable; "s3://NAME/PREFIX" is
accepted and reduced to NAME). Without it, the bucket of DEED_BUCKET is
created, else "deed".

--ignore-conditions makes the server accept conditional headers and ignore
them, like a broken store: 'deed probe' against it fails with DEED-E010 and
exit status 5.`,
		Example: `  deed fakes3 --listen 127.0.0.1:9000 --dir ./deed-store
  . ./deed-store/credentials.env     # in another shell: the store's access key
  deed fakes3 --listen 127.0.0.1:9001 --ignore-conditions`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			names, err := fakeBuckets(buckets, cfg.inv.Getenv)
			if err != nil {
				return err
			}
			if err := checkLoopbackListen("--listen", listen); err != nil {
				return err
			}
			var creds *fakes3.Credentials
			credsFile := ""
			if !noAuth {
				c, path, err := storeCredentials(dir)
				if err != nil {
					return err
				}
				creds, credsFile = &c, path
			}
			srv, err := fakes3.NewServer(fakes3.ServerOptions{
				Dir:              dir,
				Buckets:          names,
				IgnoreConditions: ignore,
				Logger:           cfg.log,
				Credentials:      creds,
			})
			if err != nil {
				return errcode.Wrap(err, "fakes3") // a damaged store file keeps its DEED-E032
			}
			url, err := srv.Start(listen)
			if err != nil {
				_ = srv.Close()
				return errcode.Wrap(err, "fakes3") // a damaged store file keeps its DEED-E032
			}
			printFakeBanner(cfg, url, dir, names, ignore, creds, credsFile)

			<-ctx.Done()
			cfg.log.Info("fakes3 shutting down", "url", url)
			if err := srv.Close(); err != nil {
				return errcode.Wrap(err, "fakes3") // a damaged store file keeps its DEED-E032
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
	f.BoolVar(&noAuth, "no-auth", false, "serve an open store: accept unsigned requests and any credentials (for tests; never on a shared machine)")
	return cmd
}

// storeCredentials returns the credentials a deed-served store checks:
// those kept in dir (generated there on first start), or fresh ones for a
// store in memory (dir ""). path is the credentials file, "" in memory.
func storeCredentials(dir string) (fakes3.Credentials, string, error) {
	if dir == "" {
		c, err := fakes3.NewCredentials()
		if err != nil {
			return c, "", errcode.Errorf(errcode.CodeUnavailable, "store credentials: %w", err)
		}
		return c, "", nil
	}
	c, path, _, err := fakes3.LoadOrCreateCredentials(dir)
	if err != nil {
		return c, path, errcode.Errorf(errcode.CodeBadRequest, "store credentials in %s: %w", dir, err)
	}
	return c, path, nil
}

// checkLoopbackListen refuses to serve a deed store off loopback: it speaks
// plain HTTP, so its requests (objects, and signatures that can be replayed
// within the clock-skew window) would cross the network in the clear.
func checkLoopbackListen(flag, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return errcode.Errorf(errcode.CodeBadRequest, "%s %q: %w", flag, addr, err)
	}
	if !isLoopback(host) {
		return errcode.Errorf(errcode.CodeBadRequest, "%s %s is not a loopback address: deed's own store serves plain HTTP for one machine "+
			"(use 127.0.0.1:PORT; to share a bucket between machines, use a real S3-compatible store)", flag, addr)
	}
	return nil
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
				return nil, errcode.Errorf(errcode.CodeBadRequest, "fakes3 --bucket: %w", err)
			}
			name = loc.Bucket
		}
		if !bucketName.MatchString(name) {
			return nil, errcode.Errorf(errcode.CodeBadRequest, "fakes3 --bucket %q: want a bucket name of 3-63 characters [a-z0-9.-]", v)
		}
		names = append(names, name)
	}
	return names, nil
}

// printFakeBanner tells the user how to point deed (or any S3 client) at the
// server.
func printFakeBanner(cfg *config, url, dir string, names []string, ignore bool, creds *fakes3.Credentials, credsFile string) {
	env := [][2]string{
		{envEndpoint, url},
		{envBucket, "s3://" + names[0]},
	}
	switch {
	case creds != nil && credsFile != "":
		// The key pair is in its 0600 file: the banner names the file and
		// never prints the secret, which under a supervisor would land in
		// the journal at every start.
	case creds != nil:
		env = append(env, [2]string{envAccessKeyID, creds.AccessKeyID}, [2]string{envSecretAccessKey, creds.SecretAccessKey})
	default:
		// Open store: the SDK still needs something to sign with.
		env = append(env, [2]string{envAccessKeyID, "any"}, [2]string{envSecretAccessKey, "any"})
	}
	env = append(env, [2]string{envRegion, s3.DefaultRegion})
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
			"open":              creds == nil,
			"credentials_file":  credsFile,
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
			"         'deed probe' against it fails with %s (exit 5).\n", errcode.CodeContract)
	}
	if creds == nil {
		fmt.Fprintf(w, "WARNING: --no-auth: this store accepts unsigned requests and any credentials;\n"+
			"         anyone who can reach %s reads and writes every key.\n", url)
		fmt.Fprintf(w, "Use it from another shell (any access key and secret will do):\n")
	} else if credsFile != "" {
		fmt.Fprintf(w, "Requests must be signed with its access key, kept in %s (mode 0600).\n", credsFile)
		fmt.Fprintf(w, "Use it from another shell:\n")
		fmt.Fprintf(w, "  . %s\n", credsFile)
	} else {
		fmt.Fprintf(w, "Requests must be signed with this access key (new at every start of a store in memory).\n")
		fmt.Fprintf(w, "Use it from another shell:\n")
	}
	for _, kv := range env {
		fmt.Fprintf(w, "  export %s=%s\n", kv[0], kv[1])
	}
	fmt.Fprintf(w, "  deed probe\n")
	fmt.Fprintf(w, "Stop with Ctrl-C.\n")
}
