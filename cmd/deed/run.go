package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/spf13/cobra"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/probe"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/daemon"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/internal/serve"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

const (
	envToken       = "DEED_TOKEN"
	envFleetSecret = "DEED_FLEET_SECRET_FILE"
)

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
	maxWaiting   int
	maxFollowers int
	fenceExit    bool
	drainTimeout time.Duration
	maxConns     int
	idleRelease  time.Duration
	keyWindow    time.Duration
	keyLimit     int
	maxCells     int
	moveRate     float64
	retention    time.Duration
	trimRate     float64

	// embedded asks for the embedded store by name (--embedded-store).
	embedded bool
	// nodeSet and advertiseSet say --node (or DEED_NODE) and --advertise
	// were given: the signs of a node meant to join others.
	nodeSet, advertiseSet bool
	tlsCert, tlsKey       string
	tokenFile             string

	// fleetSecretFile holds the secret the fleet's nodes authenticate
	// each other's forwarded requests with; fleetSecret is what it read.
	fleetSecretFile, fleetSecret string
	// peerCACert is the CA trusted for peers that serve HTTPS.
	peerCACert string
	weight     float64
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
to install. Its requests must be signed with the credentials generated at
first start in <data-dir>/s3/credentials.env (mode 0600); the CLI uses it
with those loaded ('. <data-dir>/s3/credentials.env') and --bucket s3://deed
--endpoint http://<s3-listen>. The embedded store lives and dies with this
daemon: for several local nodes, run 'deed fakes3 --dir DIR' as their store.

A node without a bucket owns every cell alone, so run refuses (DEED-E040)
to start on the embedded store when it looks like one node of many (--listen
not loopback, or --node, DEED_NODE or --advertise set) unless
--embedded-store asks for it.

--tls-cert and --tls-key serve the API over HTTPS; the pair is reloaded when
either file changes and on SIGHUP. --token-file reads the bearer token from
a file, so it never shows on a command line.

A cell with no request for --idle-release (default 10m) has its log sealed
and its record released; its next request claims it again. --max-cells N
releases the least recently used cells while more than N are held.

On SIGINT or SIGTERM it drains: every cell's log is sealed and its record
released, then the node lease; a peer can claim every cell at once.`,
		Example: `  deed run                                   # embedded store under ./deed-data
  deed run --bucket s3://my-bucket/deed --node web-1 --listen 0.0.0.0:7480 --advertise https://web-1.internal:7480 \
    --tls-cert /etc/deed/tls.crt --tls-key /etc/deed/tls.key --token-file /etc/deed/token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case rf.tokenFile != "" && cmd.Flags().Changed("token"):
				return errBothTokens()
			case rf.tokenFile != "":
				token, err := readTokenFile(rf.tokenFile)
				if err != nil {
					return err
				}
				rf.token = token
			case !cmd.Flags().Changed("token"):
				rf.token = cfg.getenv(envToken)
			}
			if !cmd.Flags().Changed("fleet-secret-file") {
				rf.fleetSecretFile = cfg.getenv(envFleetSecret)
			}
			if rf.fleetSecretFile != "" {
				secret, err := readFleetSecret(rf.fleetSecretFile)
				if err != nil {
					return err
				}
				rf.fleetSecret = secret
			}
			rf.nodeSet = cmd.Flags().Changed("node") || cfg.getenv(envNode) != ""
			rf.advertiseSet = cmd.Flags().Changed("advertise")
			return runDaemon(cmd.Context(), cfg, rf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&rf.listen, "listen", "127.0.0.1:7480", "address of the HTTP API (port 0 picks a free one, named in the log and banner)")
	f.StringVar(&rf.advertise, "advertise", "", "address peers and clients should use for this node, stored in its node lease (default http://<listen>)")
	f.DurationVar(&rf.ttl, "ttl", 10*time.Second, "node lease TTL; renewed every TTL/3, peers take over after TTL+margin of silence")
	f.StringVar(&rf.dataDir, "data-dir", "./deed-data", "where the embedded store keeps its objects (only without --bucket)")
	f.StringVar(&rf.token, "token", "", "bearer token required on the API (env "+envToken+"; required when --listen is not loopback)")
	f.StringVar(&rf.s3Listen, "s3-listen", "127.0.0.1:7481", "where the embedded store is served for the CLI and other local daemons (only without --bucket)")
	f.Int64Var(&rf.maxBody, "max-body", 1<<20, "largest accepted request body (one record), in bytes")
	f.IntVar(&rf.maxLimit, "max-limit", 1000, "largest ?limit of a read")
	f.IntVar(&rf.maxWaiting, "max-waiting-reads", daemon.DefaultMaxWaitingReads, "most reads with ?wait= waiting at once on this node (one more: DEED-E014)")
	f.IntVar(&rf.maxFollowers, "max-followers", daemon.DefaultMaxFollowers, "most event streams (?follow=true) served at once by this node (one more: DEED-E014)")
	f.BoolVar(&rf.fenceExit, "fence-exit", false, "exit with status 3 when the node fences, instead of dropping its cells and regaining its lease (for supervisors)")
	f.DurationVar(&rf.drainTimeout, "drain-timeout", 30*time.Second, "bound on the drain at shutdown")
	f.DurationVar(&rf.retention, "retention", 0, "trim, on every cell this node holds, the records older than this (by their timestamp; past the newest snapshot if need be, see deed trim); 0: keep every record")
	f.Float64Var(&rf.trimRate, "trim-delete-rate", daemon.DefaultTrimDeleteRate, "most files this node deletes per second in the background below its cells' trim points")
	f.Float64Var(&rf.moveRate, "move-rate", daemon.DefaultMoveRate, "most cells this node hands off per second to the nodes now preferred for them (a join, a drain); 0 or less: it moves none by itself (drains still run, at the default)")
	f.IntVar(&rf.maxConns, "max-conns", daemon.DefaultMaxConns, "most connections the API holds open; at the cap a new one replaces the longest idle (0: no cap)")
	f.DurationVar(&rf.idleRelease, "idle-release", daemon.DefaultIdleRelease, "seal and release a cell that has had no request for this long; its next request claims it again (0: keep cells until shutdown; else at least 1s)")
	f.DurationVar(&rf.keyWindow, "idempotency-window", replication.DefaultKeyWindow, "how long a keyed append (Idempotency-Key) is recognised: a retry within it is answered with the first result, nothing written; every node of a fleet must use the same (at least 1s)")
	f.IntVar(&rf.keyLimit, "idempotency-keys", replication.DefaultKeyLimit, "most idempotency keys recognised per cell (the newest; a new owner reads at most this many record files to learn them)")
	f.IntVar(&rf.maxCells, "max-cells", 0, "most cells held at once: above it the least recently used are released, in the background (0: no bound)")
	f.BoolVar(&rf.embedded, "embedded-store", false, "use the embedded store even though --node, --advertise or a non-loopback --listen say this node may have peers (they would not share it)")
	f.StringVar(&rf.tlsCert, "tls-cert", "", "serve the API over HTTPS with this PEM certificate (chain); reloaded when it changes and on SIGHUP")
	f.StringVar(&rf.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&rf.tokenFile, "token-file", "", "read the API's bearer token from this file (trailing newline ignored) instead of --token/"+envToken)
	f.StringVar(&rf.fleetSecretFile, "fleet-secret-file", "", "file with the secret (≥ 16 bytes, trailing newline ignored) the fleet's nodes share to forward requests to each other; without it this node serves only the cells it holds or claims (env "+envFleetSecret+")")
	f.StringVar(&rf.peerCACert, "peer-ca-cert", "", "PEM file of the CA to trust for peers that serve HTTPS (default: the system's)")
	f.Float64Var(&rf.weight, "weight", 1, "this node's share of the cells placed on the fleet, relative to its peers' (0 < W ≤ "+fmt.Sprint(owner.MaxWeight)+")")
	return cmd
}

func runDaemon(ctx context.Context, cfg *config, rf runFlags) error {
	host, _, err := net.SplitHostPort(rf.listen)
	if err != nil {
		return errcode.Errorf(errcode.CodeBadRequest, "--listen %q: %w", rf.listen, err)
	}
	if rf.token == "" && !isLoopback(host) {
		return errcode.Errorf(errcode.CodeBadRequest, "--listen %s is not loopback: set --token (or %s) so the API is not open to the network", rf.listen, envToken)
	}
	if rf.maxBody <= 0 || rf.maxLimit <= 0 || rf.maxWaiting <= 0 || rf.maxFollowers <= 0 || rf.maxConns < 0 {
		return errcode.Errorf(errcode.CodeBadRequest, "--max-body, --max-limit, --max-waiting-reads and --max-followers must be positive, --max-conns not negative")
	}
	if rf.idleRelease < 0 || (rf.idleRelease > 0 && rf.idleRelease < time.Second) || rf.maxCells < 0 {
		return errcode.Errorf(errcode.CodeBadRequest, "--idle-release %v: want 0 (off) or at least 1s; --max-cells %d: want 0 (no bound) or more", rf.idleRelease, rf.maxCells)
	}
	if rf.keyWindow < time.Second || rf.keyLimit < 1 {
		return errcode.Errorf(errcode.CodeBadRequest, "--idempotency-window %v: want at least 1s; --idempotency-keys %d: want 1 or more", rf.keyWindow, rf.keyLimit)
	}
	if err := checkStoreChoice(cfg, rf, host); err != nil {
		return err
	}
	var certs *certReloader
	if rf.tlsCert != "" || rf.tlsKey != "" {
		if rf.tlsCert == "" || rf.tlsKey == "" {
			return errcode.Errorf(errcode.CodeBadRequest, "--tls-cert and --tls-key go together")
		}
		if certs, err = newCertReloader(rf.tlsCert, rf.tlsKey, cfg.log); err != nil {
			return err
		}
		stop := reloadOnSIGHUP(certs)
		defer stop()
	}
	scheme := "http://"
	if certs != nil {
		scheme = "https://"
	}
	if err := owner.ValidateTTL(rf.ttl); err != nil {
		return errcode.Wrap(err, "--ttl")
	}
	if !(rf.weight > 0) { // the range above is owner.NewNode's check
		return errcode.Errorf(errcode.CodeBadRequest, "--weight %v: want a share above 0", rf.weight)
	}
	peerClient, err := newPeerClient(rf.peerCACert)
	if err != nil {
		return err
	}
	// The API's port is bound first, so that "address in use" fails at
	// once, and /healthz answers while the store is probed (/readyz says
	// not ready until the daemon is up).
	ln, err := net.Listen("tcp", rf.listen)
	if err != nil {
		return errcode.Errorf(errcode.CodeBadRequest, "listen %s: %w", rf.listen, err)
	}
	if _, port, _ := net.SplitHostPort(rf.listen); port == "0" {
		// Port 0 picked a free port: it is the one to advertise and report.
		rf.listen = ln.Addr().String()
	}
	if rf.advertise == "" {
		rf.advertise = scheme + rf.listen
	}
	// The fleet secret from the first answer: a peer forwarding to this
	// node while it starts gets a proved "not applied, retry", not a 401.
	api := daemon.APIConfig{Token: rf.token, MaxBody: rf.maxBody, MaxLimit: rf.maxLimit, MaxWaitingReads: rf.maxWaiting, MaxFollowers: rf.maxFollowers, Node: cfg.node}.WithFleetSecret(rf.fleetSecret)
	// Requests get a context the drain cancels: http.Server.Shutdown waits
	// for handlers but never cancels them, and an append retrying its slot
	// through an outage would hold the whole drain budget.
	reqCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	h := &daemon.SwapHandler{}
	h.Set(daemon.StartingHandler(api))
	srv, sln := daemon.NewServer(h, ln, rf.maxConns, reqCtx)
	// The server's own errors (failed TLS handshakes, mostly) go through
	// the logger, rate-limited, not to stderr in plain text.
	srv.ErrorLog = serve.ErrorLog(cfg.log, "api")
	if certs != nil {
		// TLS on top of the connection cap: the cap counts (and may
		// replace) idle connections whatever they carry.
		sln = tls.NewListener(sln, certs.tlsConfig())
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(sln) }()
	stopEarly := func() { _ = srv.Close() }

	b, where, closeStore, err := openRunStore(ctx, cfg, &rf)
	if err != nil {
		stopEarly()
		return err
	}
	defer closeStore()
	cfg.log.Info("API listening; the store is probed before the node serves cells", "addr", scheme+rf.listen)

	v, _ := buildVersion()
	dcfg := daemon.Config{Node: cfg.node, Advertise: rf.advertise, TTL: rf.ttl, FenceExit: rf.fenceExit, API: api, Version: v,
		FleetSecret: rf.fleetSecret, Weight: rf.weight, PeerClient: peerClient,
		IdleRelease: rf.idleRelease, MaxCells: rf.maxCells, MoveRate: moveRateConfig(rf.moveRate),
		KeyWindow: rf.keyWindow, KeyLimit: rf.keyLimit, Retention: rf.retention, TrimDeleteRate: rf.trimRate}
	if rf.retention < 0 || rf.trimRate <= 0 {
		return errcode.Errorf(errcode.CodeBadRequest, "--retention %v must not be negative and --trim-delete-rate %v must be above 0", rf.retention, rf.trimRate)
	}
	if rf.fleetSecret == "" {
		cfg.log.Info("no fleet secret (--fleet-secret-file): requests for cells another node holds are refused with DEED-E020, not forwarded")
	}
	d, err := openDaemon(ctx, dcfg, b, cfg.log)
	if err != nil {
		stopEarly()
		return err
	}
	h.Set(d.Handler())
	// Event streams never end by themselves: the shutdown ends them (each
	// client reconnects elsewhere) rather than waiting out its budget.
	srv.RegisterOnShutdown(d.EndStreams)
	trimCtx, stopTrim := context.WithCancel(ctx)
	defer stopTrim()
	startIdleTrim(trimCtx)
	printRunBanner(cfg, rf, scheme+ln.Addr().String(), where)

	var runErr error
	select {
	case <-ctx.Done():
		cfg.log.Info("shutting down: draining cells")
	case err := <-d.Fenced():
		runErr = err
	case err := <-serveErr:
		runErr = errcode.Errorf(errcode.CodeUnavailable, "serve %s: %w", rf.listen, err)
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rf.drainTimeout)
	defer cancel()
	if runErr == nil {
		// A planned stop (SIGTERM, Ctrl-C) leaves as `deed drain` does:
		// cells handed off and peers routing elsewhere while the API still
		// answers, within half the drain budget, before the listener
		// closes. A fence or a dead listener stops at once.
		lctx, lcancel := context.WithTimeout(dctx, rf.drainTimeout/2)
		if err := d.Leave(lctx); err != nil {
			cfg.log.Warn("leaving the fleet: not every cell was handed off; the rest is released", "err", err)
		}
		lcancel()
	}
	// A quarter of the drain budget lets requests in flight finish; then
	// they are cancelled, and sealing and releasing the cells gets the rest
	// to itself.
	sctx, scancel := context.WithTimeout(dctx, rf.drainTimeout/4)
	_ = srv.Shutdown(sctx)
	scancel()
	cancelRequests()
	if err := d.Close(dctx); err != nil && runErr == nil {
		runErr = errcode.Wrap(err, "drain")
	}
	return runErr
}

// openDaemon probes the store, refusing one that fails the conditional-write
// contract (DEED-E010) before anything is written, and opens the daemon on it.
func openDaemon(ctx context.Context, cfg daemon.Config, b bucket.Bucket, log *slog.Logger) (*daemon.Daemon, error) {
	rep, err := probe.Run(ctx, b, probe.Options{})
	if err != nil {
		return nil, err // it says "probe: ..." already
	}
	for _, c := range rep.Checks {
		if c.Warning {
			log.Warn("store probe warning", "check", c.Name, "detail", c.Detail)
		}
	}
	return daemon.Open(ctx, cfg, b, log)
}

// checkStoreChoice refuses the embedded store where it would silently make
// this node the only owner of every cell: every node started without a
// bucket has a store of its own, so two of them both "own" each cell. A
// node that looks like one of many (reachable off loopback, or given a
// name or an address for peers) must name a bucket, or ask for the
// embedded store with --embedded-store.
func checkStoreChoice(cfg *config, rf runFlags, listenHost string) error {
	if cfg.bucketURL != "" {
		if rf.embedded {
			return errcode.Errorf(errcode.CodeBadRequest, "--embedded-store and --bucket (or %s) contradict each other: choose one", envBucket)
		}
		return nil
	}
	if rf.embedded {
		return nil
	}
	var why []string
	if !isLoopback(listenHost) {
		why = append(why, "--listen "+rf.listen+" is not loopback")
	}
	if rf.nodeSet {
		why = append(why, "--node (or "+envNode+") is set")
	}
	if rf.advertiseSet {
		why = append(why, "--advertise is set")
	}
	if len(why) == 0 {
		return nil
	}
	return errcode.Errorf(errcode.CodeBadRequest, "no bucket, and %s: this node may have peers, and on a store of its own it would "+
		"own every cell alone. Set --bucket s3://NAME[/PREFIX] (or %s) to the store the nodes share, "+
		"or pass --embedded-store to run on a store only this daemon uses", strings.Join(why, ", "), envBucket)
}

// openRunStore opens --bucket, or starts the embedded store (and sets
// rf.s3Listen to the address it got, when --s3-listen asked for port 0).
func openRunStore(ctx context.Context, cfg *config, rf *runFlags) (bucket.Bucket, string, func(), error) {
	if cfg.bucketURL != "" {
		b, loc, err := cfg.openBucket(ctx)
		if err != nil {
			return nil, "", nil, err
		}
		return b, cfg.describe(loc), func() {}, nil
	}
	if err := checkLoopbackListen("--s3-listen", rf.s3Listen); err != nil {
		return nil, "", nil, err
	}
	dir := filepath.Join(rf.dataDir, "s3")
	creds, credsFile, err := storeCredentials(dir)
	if err != nil {
		return nil, "", nil, err
	}
	srv, err := fakes3.NewServer(fakes3.ServerOptions{Dir: dir, Buckets: []string{defaultFakeBucket}, Logger: cfg.log, Credentials: &creds})
	if err != nil {
		return nil, "", nil, errcode.Wrap(err, "embedded store in %s", rf.dataDir) // a damaged store file keeps its DEED-E032
	}
	url, err := srv.Start(rf.s3Listen)
	if err != nil {
		_ = srv.Close()
		return nil, "", nil, errcode.Errorf(errcode.CodeBadRequest, "embedded store on %s: %w", rf.s3Listen, err)
	}
	rf.s3Listen = strings.TrimPrefix(url, "http://")
	loc := bucket.Location{Bucket: defaultFakeBucket}
	b, err := s3.Open(ctx, loc, s3.Options{Endpoint: url, Credentials: credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, "")})
	if err != nil {
		_ = srv.Close()
		return nil, "", nil, errcode.Errorf(errcode.CodeUnavailable, "embedded store: %w", err)
	}
	return b, "embedded store " + loc.String() + " at " + url + " (data in " + rf.dataDir + ", credentials in " + credsFile + ")", func() { _ = srv.Close() }, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// printRunBanner says, in a few lines, what to do next.
func printRunBanner(cfg *config, rf runFlags, api, where string) {
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
		fmt.Fprintf(w, "the CLI on the embedded store: . %s && deed --bucket s3://%s --endpoint http://%s <command>\n",
			filepath.Join(rf.dataDir, "s3", fakes3.CredentialsFile), defaultFakeBucket, rf.s3Listen)
		fmt.Fprintf(w, "it stops with this daemon: for several nodes on this machine, share 'deed fakes3 --dir DIR' instead\n")
	}
	fmt.Fprintf(w, "stop with Ctrl-C: cells are sealed and released, peers can claim them at once\n")
}

// moveRateConfig maps --move-rate to daemon.Config.MoveRate, where 0 means
// the default: on the command line 0 turns rebalancing off.
func moveRateConfig(flag float64) float64 {
	if flag <= 0 {
		return -1
	}
	return flag
}
