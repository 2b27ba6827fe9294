package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/spf13/cobra"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

const envToken = "DEED_TOKEN"

// runFlags are `deed run`'s own flags.
type runFlags struct {
	listen       string
	advertise    string
	ttl          time.Duration
	dataDir      string
	token        string
	s3Listen     string
	maxBody      int64
	maxLimit     int
	fenceExit    bool
	drainTimeout time.Duration
}

func newRunCmd(cfg *config) *cobra.Command {
	var rf runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the node daemon: hold a node lease, own cells, serve their logs over HTTP",
		Long: `run is the long-running deed node. It probes the store (refusing one that
fails the conditional-write contract: DEED-E010, exit 5), opens its node
lease, watches its peers' leases, and serves the HTTP API on --listen.

Without --bucket it serves an embedded store (gofakes3, persisted under
--data-dir) on --s3-listen and uses it: a one-machine deed with nothing else
to install. The CLI and a second daemon on the same machine share it with
--bucket s3://deed --endpoint http://<s3-listen>.

On SIGINT or SIGTERM it drains: every cell's log is sealed and its record
released, then the node lease; a peer can claim every cell at once.`,
		Example: `  deed run                                   # embedded store under ./deed-data
  deed run --bucket s3://my-bucket/deed --node web-1 --advertise http://10.0.0.5:7480 --listen 0.0.0.0:7480 --token $TOKEN`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("token") {
				rf.token = cfg.inv.Getenv(envToken)
			}
			return runDaemon(cmd.Context(), cfg, rf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&rf.listen, "listen", "127.0.0.1:7480", "address of the HTTP API")
	f.StringVar(&rf.advertise, "advertise", "", "address peers and clients should use for this node, stored in its node lease (default http://<listen>)")
	f.DurationVar(&rf.ttl, "ttl", 10*time.Second, "node lease TTL; renewed every TTL/3, peers take over after TTL+margin of silence")
	f.StringVar(&rf.dataDir, "data-dir", "./deed-data", "where the embedded store keeps its objects (only without --bucket)")
	f.StringVar(&rf.token, "token", "", "bearer token required on the API (env "+envToken+"; required when --listen is not loopback)")
	f.StringVar(&rf.s3Listen, "s3-listen", "127.0.0.1:7481", "where the embedded store is served for the CLI and other local daemons (only without --bucket)")
	f.Int64Var(&rf.maxBody, "max-body", 1<<20, "largest accepted request body (one record), in bytes")
	f.IntVar(&rf.maxLimit, "max-limit", 1000, "largest ?limit of a read")
	f.BoolVar(&rf.fenceExit, "fence-exit", false, "exit with status 3 when the node fences, instead of dropping its cells and regaining its lease (for supervisors)")
	f.DurationVar(&rf.drainTimeout, "drain-timeout", 30*time.Second, "bound on the drain at shutdown")
	return cmd
}

func runDaemon(ctx context.Context, cfg *config, rf runFlags) error {
	host, _, err := net.SplitHostPort(rf.listen)
	if err != nil {
		return bucket.Errorf(bucket.CodeBadRequest, "--listen %q: %w", rf.listen, err)
	}
	if rf.token == "" && !isLoopback(host) {
		return bucket.Errorf(bucket.CodeBadRequest, "--listen %s is not loopback: set --token (or %s) so the API is not open to the network", rf.listen, envToken)
	}
	if rf.maxBody <= 0 || rf.maxLimit <= 0 {
		return bucket.Errorf(bucket.CodeBadRequest, "--max-body and --max-limit must be positive")
	}
	if err := owner.ValidateTTL(rf.ttl); err != nil {
		return bucket.Wrap(err, "--ttl")
	}
	if rf.advertise == "" {
		rf.advertise = "http://" + rf.listen
	}

	b, where, closeStore, err := openRunStore(ctx, cfg, rf)
	if err != nil {
		return err
	}
	defer closeStore()

	m := newMetrics()
	d, err := openDaemon(ctx, daemonConfig{Node: cfg.node, Advertise: rf.advertise, TTL: rf.ttl, FenceExit: rf.fenceExit}, b, cfg.log, m)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", rf.listen)
	if err != nil {
		_ = d.Close(context.WithoutCancel(ctx))
		return bucket.Errorf(bucket.CodeBadRequest, "listen %s: %w", rf.listen, err)
	}
	// Requests get a context the drain cancels: http.Server.Shutdown waits
	// for handlers but never cancels them, and an append retrying its slot
	// through an outage would hold the whole drain budget.
	reqCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := &http.Server{
		Handler:           d.handler(apiConfig{Token: rf.token, MaxBody: rf.maxBody, MaxLimit: rf.maxLimit}),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	printRunBanner(cfg, rf, ln.Addr().String(), where)

	var runErr error
	select {
	case <-ctx.Done():
		cfg.log.Info("shutting down: draining cells")
	case err := <-d.fenced:
		runErr = err
	case err := <-serveErr:
		runErr = bucket.Errorf(bucket.CodeUnavailable, "serve %s: %w", rf.listen, err)
	}
	// A quarter of the drain budget lets requests in flight finish; then
	// they are cancelled, and sealing and releasing the cells gets the rest
	// to itself.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rf.drainTimeout)
	defer cancel()
	sctx, scancel := context.WithTimeout(dctx, rf.drainTimeout/4)
	_ = srv.Shutdown(sctx)
	scancel()
	cancelRequests()
	if err := d.Close(dctx); err != nil && runErr == nil {
		runErr = bucket.Wrap(err, "drain")
	}
	return runErr
}

// openRunStore opens --bucket, or starts the embedded store.
func openRunStore(ctx context.Context, cfg *config, rf runFlags) (bucket.Bucket, string, func(), error) {
	if cfg.bucketURL != "" {
		b, loc, err := cfg.openBucket(ctx)
		if err != nil {
			return nil, "", nil, err
		}
		return b, cfg.describe(loc), func() {}, nil
	}
	srv, err := fakes3.NewServer(fakes3.ServerOptions{Dir: filepath.Join(rf.dataDir, "s3"), Buckets: []string{defaultFakeBucket}, Logger: cfg.log})
	if err != nil {
		return nil, "", nil, bucket.Errorf(bucket.CodeUnavailable, "embedded store in %s: %w", rf.dataDir, err)
	}
	url, err := srv.Start(rf.s3Listen)
	if err != nil {
		_ = srv.Close()
		return nil, "", nil, bucket.Errorf(bucket.CodeBadRequest, "embedded store on %s: %w", rf.s3Listen, err)
	}
	loc := bucket.Location{Bucket: defaultFakeBucket}
	b, err := bucket.OpenS3(ctx, loc, bucket.S3Options{Endpoint: url, Credentials: credentials.NewStaticCredentialsProvider("deed", "deed", "")})
	if err != nil {
		_ = srv.Close()
		return nil, "", nil, bucket.Errorf(bucket.CodeUnavailable, "embedded store: %w", err)
	}
	return b, "embedded store " + loc.String() + " at " + url + " (data in " + rf.dataDir + ")", func() { _ = srv.Close() }, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// printRunBanner says, in a few lines, what to do next.
func printRunBanner(cfg *config, rf runFlags, addr, where string) {
	api := "http://" + addr
	if cfg.json {
		writeJSON(cfg.inv.Stdout, map[string]any{"node": cfg.node, "api": api, "advertise": rf.advertise, "store": where})
		return
	}
	w := cfg.inv.Stdout
	fmt.Fprintf(w, "deed node %s serving %s\nstore: %s\n", cfg.node, api, where)
	auth := ""
	if rf.token != "" {
		auth = ` -H "Authorization: Bearer $DEED_TOKEN"`
	}
	fmt.Fprintf(w, "try:\n")
	fmt.Fprintf(w, "  curl%s -X POST --data-binary 'hello' %s/v1/cells/demo/append\n", auth, api)
	fmt.Fprintf(w, "  curl%s '%s/v1/cells/demo/records?after=0&barrier=true'\n", auth, api)
	fmt.Fprintf(w, "  curl%s %s/v1/cells/demo\n", auth, api)
	if cfg.bucketURL == "" {
		fmt.Fprintf(w, "share the embedded store: deed --bucket s3://%s --endpoint http://%s <command>  (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY: any values)\n", defaultFakeBucket, rf.s3Listen)
	}
	fmt.Fprintf(w, "stop with Ctrl-C: cells are sealed and released, peers can claim them at once\n")
}
