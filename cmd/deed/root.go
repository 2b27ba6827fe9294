package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/spf13/cobra"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
)

// invocation is everything a run of the CLI depends on from outside, so that
// tests run commands in-process without touching the real environment.
type invocation struct {
	Args   []string
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads deed's own environment variables (DEED_*, AWS_REGION,
	// AWS_ENDPOINT_URL_S3). The AWS SDK still reads the process environment
	// for credentials and its shared config.
	Getenv func(string) string
	// Credentials, when set, replaces the AWS default credential chain
	// (tests use static keys).
	Credentials aws.CredentialsProvider
}

// config is shared by every command: the persistent flags, resolved against
// the environment in the root's PersistentPreRunE, plus the outputs. Later
// commands (run, claim, release, show, ls, nodes, exec, append, read, gc)
// take it the same way probe does.
type config struct {
	inv invocation

	// Persistent flags, as given.
	bucketURL string
	endpoint  string
	region    string
	node      string
	// nodeSet says --node was given on the command line. Only the daemon
	// takes its id from DEED_NODE or the hostname; claim and exec act
	// under an identity of their own unless --node names one.
	nodeSet   bool
	json      bool
	logLevel  string
	logFormat string

	// log writes to stderr at --log-level; set by PersistentPreRunE.
	log *slog.Logger
	// ready is set once flags and arguments were accepted: an error after
	// that point comes from the command itself, one before it is a usage
	// error (DEED-E040).
	ready bool
}

// commands lists the subcommand constructors, one file each. Add new
// commands here.
var commands = []func(*config) *cobra.Command{
	newProbeCmd,
	newFakes3Cmd,
	newVersionCmd,
	newRunCmd,
	newClaimCmd,
	newReleaseCmd,
	newShowCmd,
	newLsCmd,
	newNodesCmd,
	newExecCmd,
	newAppendCmd,
	newReadCmd,
	newTailCmd,
	newSnapshotCmd,
	newTrimCmd,
	newGCCmd,
	newMoveCmd,
	newDrainCmd,
	newBenchCmd,
}

// Environment variables read by the persistent flags.
const (
	envBucket     = "DEED_BUCKET"
	envEndpoint   = "DEED_ENDPOINT"
	envEndpointS3 = "AWS_ENDPOINT_URL_S3"
	envRegion     = "AWS_REGION"
	envNode       = "DEED_NODE"
)

func newRootCmd(cfg *config) *cobra.Command {
	root := &cobra.Command{
		Use:   "deed",
		Short: "deed gives each cell exactly one owner, using only an S3 bucket",
		Long: `deed gives each cell (a tenant, shard, actor, job: any unit that must have
exactly one writer) an owner, using nothing but an S3 bucket's conditional
writes.

Errors start with a stable code (DEED-Ennn); the exit status follows from it:
0 ok, 1 error, 2 bad input, 3 fenced, 4 held by another node, 5 the store
fails the conditional-write contract.`,
		SilenceErrors: true, // run prints errors, with their code
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			cfg.ready = true
			return cfg.resolve(cmd)
		},
	}
	// --version prints what `deed version` prints (cobra adds the flag
	// when Version is set).
	v, _ := buildVersion()
	root.Version = v
	root.SetVersionTemplate(versionLine(v) + "\n")
	root.SetOut(cfg.inv.Stdout)
	root.SetErr(cfg.inv.Stderr)
	root.SetArgs(cfg.inv.Args)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return errcode.Errorf(errcode.CodeBadRequest, "%s: %w (see '%s --help')", cmd.CommandPath(), err, cmd.CommandPath())
	})

	f := root.PersistentFlags()
	f.StringVar(&cfg.bucketURL, "bucket", "", "bucket as s3://NAME[/PREFIX], gs://NAME[/PREFIX] or az://CONTAINER[/PREFIX] (env "+envBucket+")")
	f.StringVar(&cfg.endpoint, "endpoint", "", "S3 endpoint URL for S3-compatible stores (env "+envEndpoint+", then "+envEndpointS3+"; default AWS)")
	f.StringVar(&cfg.region, "region", "", "signing region (env "+envRegion+", then the AWS config; default "+s3.DefaultRegion+")")
	f.StringVar(&cfg.node, "node", "", "node id: the daemon's (run; env "+envNode+", default the hostname), or the id claim, exec and release act as (default: a fresh <host>-cli-… / <host>-exec-… id; never a live node's, see --as-node)")
	f.BoolVar(&cfg.json, "json", false, "print results and errors as JSON")
	f.StringVar(&cfg.logLevel, "log-level", "info", "log level on stderr: debug, info, warn or error")
	f.StringVar(&cfg.logFormat, "log-format", "", "log format on stderr: text or json (default text; json with --json)")

	for _, c := range commands {
		root.AddCommand(c(cfg))
	}
	return root
}

// resolve fills unset flags from the environment and sets up logging.
func (cfg *config) resolve(cmd *cobra.Command) error {
	env := cfg.inv.Getenv
	if env == nil {
		env = func(string) string { return "" }
	}
	flags := cmd.Flags()
	if !flags.Changed("bucket") {
		cfg.bucketURL = env(envBucket)
	}
	if !flags.Changed("endpoint") {
		cfg.endpoint = firstNonEmpty(env(envEndpoint), env(envEndpointS3))
	}
	if !flags.Changed("region") {
		cfg.region = env(envRegion)
	}
	cfg.nodeSet = flags.Changed("node")
	if !cfg.nodeSet {
		cfg.node = env(envNode)
		if cfg.node == "" {
			cfg.node, _ = os.Hostname()
		}
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.logLevel)); err != nil {
		return errcode.Errorf(errcode.CodeBadRequest, "--log-level %q: want debug, info, warn or error", cfg.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch cfg.logFormat {
	case "":
		cfg.logFormat = "text"
		if cfg.json {
			cfg.logFormat = "json"
		}
	case "text", "json":
	default:
		return errcode.Errorf(errcode.CodeBadRequest, "--log-format %q: want text or json", cfg.logFormat)
	}
	if cfg.logFormat == "json" {
		cfg.log = slog.New(slog.NewJSONHandler(cfg.inv.Stderr, opts))
	} else {
		cfg.log = slog.New(slog.NewTextHandler(cfg.inv.Stderr, opts))
	}
	return nil
}

// openBucket opens the configured bucket. Every configuration mistake (no
// bucket, a malformed URL or endpoint) is DEED-E040 and is reported before
// any request is sent.
func (cfg *config) openBucket(ctx context.Context) (bucket.Bucket, bucket.Location, error) {
	if cfg.bucketURL == "" {
		return nil, bucket.Location{}, errcode.Errorf(errcode.CodeBadRequest, "no bucket: set --bucket s3://NAME[/PREFIX] (or gs://, az://) or %s", envBucket)
	}
	loc, err := bucket.ParseURL(cfg.bucketURL)
	if err != nil {
		return nil, bucket.Location{}, errcode.Errorf(errcode.CodeBadRequest, "--bucket: %w", err)
	}
	b, err := cfg.openStore(ctx, loc)
	if err != nil {
		return nil, loc, errcode.Errorf(errcode.CodeBadRequest, "%w", err)
	}
	cfg.log.Debug("bucket opened", "bucket", loc.String(), "endpoint", redactURL(cfg.endpoint), "region", cfg.region)
	return b, loc, nil
}

// describe names the configured store for reports: the URL, plus the
// endpoint when it is not AWS.
func (cfg *config) describe(loc bucket.Location) string {
	if cfg.endpoint == "" {
		return loc.String()
	}
	return loc.String() + " at " + redactURL(cfg.endpoint)
}

// run executes one invocation of the CLI and returns its exit status. It is
// the single place that turns an error into output and a status.
func run(ctx context.Context, inv invocation) int {
	out := &outputWriter{w: inv.Stdout}
	inv.Stdout = out
	cfg := &config{inv: inv}
	root := newRootCmd(cfg)
	cmd, err := root.ExecuteContextC(ctx)
	if werr := out.failed(); werr != nil && (err == nil || errors.Is(err, werr)) {
		// The command did what it was asked (an append is written, a
		// claim held); only its answer is lost. (A command that returned
		// the write error itself, as ls does from its table, is the same.)
		err = errcode.Errorf(errcode.CodeOutput, "the command completed, but its output could not be written: %w", werr)
	}
	if err == nil {
		return 0
	}
	if !cfg.ready {
		// Unknown command, unknown flag, wrong number of arguments: cobra
		// rejected the command line before any command ran. The error
		// names the command it is about and that command's own usage.
		var coded *errcode.Error
		if !errors.As(err, &coded) {
			err = usageError(cmd, err)
		}
		// cobra may have stopped before parsing --json (an unknown command).
		cfg.json = cfg.json || wantsJSON(inv.Args)
	}
	return cfg.fail(err)
}

// usageError is cobra's complaint about cmd's command line, with cmd's
// usage line and where its help is, on one line that starts with the code.
func usageError(cmd *cobra.Command, err error) error {
	if cmd == nil || !cmd.HasParent() {
		return errcode.Errorf(errcode.CodeBadRequest, "%w (see 'deed --help')", err)
	}
	return errcode.Errorf(errcode.CodeBadRequest, "%s: %w (usage: %s; see '%s --help')", cmd.CommandPath(), err, cmd.UseLine(), cmd.CommandPath())
}

// fail prints err to stderr, led by its code (as JSON with --json), and
// returns the exit status for that code.
func (cfg *config) fail(err error) int {
	var child *childExit
	if errors.As(err, &child) {
		// deed exec: the command's own exit status, passed through. The
		// command printed its own errors; this is not one of deed's.
		return child.status
	}
	code := errcode.CodeOf(err)
	msg := strings.TrimSpace(strings.TrimPrefix(err.Error(), string(code)))
	// A failed write says whether it may have taken effect.
	var wf *writeFailure
	var ap client.Applied
	if errors.As(err, &wf) {
		ap = client.AppliedOf(err)
	}
	if cfg.json {
		writeJSON(cfg.inv.Stderr, struct {
			Code    errcode.Code   `json:"code"`
			Error   string         `json:"error"`
			Applied client.Applied `json:"applied,omitempty"`
		}{code, msg, ap})
	} else if ap != "" {
		fmt.Fprintf(cfg.inv.Stderr, "%s %s (applied: %s)\n", code, msg, ap)
	} else {
		fmt.Fprintf(cfg.inv.Stderr, "%s %s\n", code, msg)
	}
	return codeExitStatus(code)
}

// writeFailure marks the error of a command that asked for a write (deed
// append), so that fail reports whether it may have been applied.
type writeFailure struct{ err error }

func (e *writeFailure) Error() string { return e.err.Error() }
func (e *writeFailure) Unwrap() error { return e.err }

// wantsJSON scans raw arguments for --json, for errors cobra reports before
// it parses flags.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "--json=true":
			return true
		}
	}
	return false
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
