// Command peers measures how deed, Litestream's S3 leaser and sets3lock
// acquire a lock on one object store, side by side: deed's HTTP fake S3
// server behind one in-process reverse proxy that adds a fixed delay to
// every request (default 20 ms), everything on 127.0.0.1. It prints the
// acquisition rows of the performance table as Markdown. Run it with
// `make bench-peers` from the repository root.
//
// It is its own Go module so that the peers' dependencies stay out of
// deed's.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/benbjohnson/litestream"
	lss3 "github.com/benbjohnson/litestream/s3"
	"github.com/shogo82148/sets3lock"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

const storeBucket = "peers"

func main() {
	delay := flag.Duration("delay", 20*time.Millisecond, "latency the proxy adds to every request (one round trip)")
	n := flag.Int("n", 25, "acquisitions per tool and row")
	ttl := flag.Duration("ttl", owner.DefaultTTL, "lease TTL the renewal row assumes for every tool")
	leases := flag.Int("leases", 1000, "held leases in the renewal row")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *delay, *n, *ttl, *leases); err != nil {
		fmt.Fprintln(os.Stderr, "bench-peers:", err)
		os.Exit(1)
	}
}

// proxy forwards every request to the store after a fixed delay and
// counts requests by the first path segment of the key (the tool's
// prefix), so each tool's requests are counted apart from the others'
// and from deed's node-lease traffic.
type proxy struct {
	delay time.Duration
	next  http.Handler

	mu     sync.Mutex
	counts map[string]int64
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	time.Sleep(p.delay)
	// Path-style: /<bucket>/<key>; list requests carry the key prefix in
	// the query.
	key := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/"+storeBucket), "/")
	if key == "" {
		key = r.URL.Query().Get("prefix")
	}
	parts := strings.SplitN(key+"/", "/", 3)
	p.mu.Lock()
	p.counts[parts[0]+"/"+parts[1]]++
	p.mu.Unlock()
	p.next.ServeHTTP(w, r)
}

// count returns the requests sent so far under prefix ("tool/area").
func (p *proxy) count(prefix string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[prefix]
}

// result is one row cell: mean latency in RTTs and requests per acquisition.
type result struct{ rtt, req float64 }

// locker is one tool's acquire and release of a lock on a key of its own.
type locker interface {
	acquire(ctx context.Context, key string) error
	release(ctx context.Context, key string) error
}

func run(ctx context.Context, out io.Writer, delay time.Duration, n int, ttl time.Duration, leases int) error {
	srv, err := fakes3.NewServer(fakes3.ServerOptions{Buckets: []string{storeBucket}})
	if err != nil {
		return err
	}
	defer srv.Close()
	storeURL, err := srv.Start("127.0.0.1:0")
	if err != nil {
		return err
	}
	target, err := url.Parse(storeURL)
	if err != nil {
		return err
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(io.Discard, "", 0) // requests cut off when the run ends
	px := &proxy{delay: delay, next: rp, counts: map[string]int64{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: px, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	endpoint := "http://" + ln.Addr().String()

	creds := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: "bench", SecretAccessKey: "bench", Source: "bench-peers"}, nil
	})
	client := awss3.New(awss3.Options{
		Region: s3.DefaultRegion, BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials:                creds,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})

	b, err := s3.Open(ctx, bucket.Location{Bucket: storeBucket}, s3.Options{
		Endpoint: endpoint, Region: s3.DefaultRegion, Credentials: creds,
	})
	if err != nil {
		return err
	}
	// No record watch, as in the daemon: its background GETs would land
	// in the counted requests of the lock operations.
	node, err := owner.NewNode(bucket.WithPrefix(b, "deed"), owner.Config{Name: "bench", Addr: "http://127.0.0.1:0", TTL: ttl, WatchInterval: -1})
	if err != nil {
		return err
	}
	if err := node.Open(ctx); err != nil {
		return err
	}
	defer node.Close(context.WithoutCancel(ctx))
	// Another process: a second node id that releases what it took.
	other, err := owner.NewNode(bucket.WithPrefix(b, "deed"), owner.Config{Name: "other"})
	if err != nil {
		return err
	}

	tools := []struct {
		name   string
		prefix string // counted area: the tool's lock objects
		l      locker
		other  locker // another process's, for the third row
	}{
		{"deed", "deed/cells", &deedLocker{node: node, held: map[string]*owner.Lease{}}, &deedLocker{node: other, held: map[string]*owner.Lease{}}},
		{"Litestream " + modVersion("github.com/benbjohnson/litestream") + " awss3.Leaser", "litestream/cells",
			&litestreamLocker{client: client, held: map[string]*litestream.Lease{}}, &litestreamLocker{client: client, held: map[string]*litestream.Lease{}}},
		{"sets3lock " + modVersion("github.com/shogo82148/sets3lock"), "sets3lock/cells",
			&sets3Locker{client: client, held: map[string]*sets3lock.Locker{}}, &sets3Locker{client: client, held: map[string]*sets3lock.Locker{}}},
	}
	var fresh, again, others []result
	for _, tool := range tools {
		// Warm up (connections, the SDK's first-request setup): not reported.
		if _, err := measure(ctx, px, tool.prefix, delay, 3, "warmup", tool.l, tool.l); err != nil {
			return fmt.Errorf("%s: warm-up: %w", tool.name, err)
		}
		f, err := measure(ctx, px, tool.prefix, delay, n, "fresh", tool.l, nil)
		if err != nil {
			return fmt.Errorf("%s: acquire a never-claimed cell: %w", tool.name, err)
		}
		a, err := measure(ctx, px, tool.prefix, delay, n, "again", tool.l, tool.l)
		if err != nil {
			return fmt.Errorf("%s: acquire after release: %w", tool.name, err)
		}
		o, err := measure(ctx, px, tool.prefix, delay, n, "other", tool.l, tool.other)
		if err != nil {
			return fmt.Errorf("%s: acquire after another's release: %w", tool.name, err)
		}
		fresh = append(fresh, f)
		again = append(again, a)
		others = append(others, o)
	}

	perNode, err := deedRenewals(ctx, b, px, leases, delay)
	if err != nil {
		return fmt.Errorf("deed renewals: %w", err)
	}
	// deedRenewals measures requests per renewal interval; scale to an hour
	// at the TTL the row assumes (renewal every TTL/3).
	perHour := func(perInterval float64) float64 { return perInterval * float64(time.Hour) / float64(ttl/3) }
	lsPerRenew, err := litestreamRenewal(ctx, px, client)
	if err != nil {
		return fmt.Errorf("litestream renewal: %w", err)
	}

	fmt.Fprintf(out, "Through one %v latency proxy in front of deed's fakes3 server (127.0.0.1), %d acquisitions per cell; RTT = mean latency / %v.\n\n", delay, n, delay)
	fmt.Fprintf(out, "| measurement | %s | %s | %s | limit |\n|---|---|---|---|---|\n", tools[0].name, tools[1].name, tools[2].name)
	row := func(name string, rs []result, limit string) {
		fmt.Fprintf(out, "| %s |", name)
		for _, r := range rs {
			fmt.Fprintf(out, " %.2f RTT, %.2f requests |", r.rtt, r.req)
		}
		fmt.Fprintf(out, " %s |\n", limit)
	}
	row("acquire a never-claimed cell", fresh, "1 conditional PUT")
	row("acquire after release (by the same process)", again, "1 for the node that released it")
	row("acquire after another process released it", others, "—")
	fmt.Fprintf(out, "| renewals per hour, %s held leases (TTL %v, renewed every TTL/3) | %s per node (%.2f requests per TTL/3, measured; independent of the leases held) | %s (%.0f PUT per lease per renewal, measured; v0.5.x leaves the renewal loop to the caller, TTL/3 assumed) | 0 (no renewal: a lock is taken over once its LastModified is older than a grace period, on the local clock) | O(nodes) |\n",
		thousands(float64(leases)), ttl, thousands(perHour(perNode)), perNode, thousands(perHour(lsPerRenew)*float64(leases)), lsPerRenew)
	return nil
}

// measure times n acquisitions by l of fresh keys under prefix/name-<i>,
// and returns the mean latency in units of delay and the mean number of
// requests under prefix. When first is set, it acquires and releases each
// key before (not timed, not counted). Each lock l acquired is released
// afterwards, outside the measurement.
func measure(ctx context.Context, px *proxy, prefix string, delay time.Duration, n int, name string, l, first locker) (result, error) {
	var total time.Duration
	var reqs int64
	for i := range n {
		key := fmt.Sprintf("%s/%s-%d", prefix, name, i)
		if first != nil {
			if err := first.acquire(ctx, key); err != nil {
				return result{}, err
			}
			if err := first.release(ctx, key); err != nil {
				return result{}, err
			}
		}
		before := px.count(prefix)
		start := time.Now()
		if err := l.acquire(ctx, key); err != nil {
			return result{}, err
		}
		total += time.Since(start)
		reqs += px.count(prefix) - before
		if err := l.release(ctx, key); err != nil {
			return result{}, err
		}
	}
	return result{
		rtt: float64(total) / float64(n) / float64(delay),
		req: float64(reqs) / float64(n),
	}, nil
}

// deedRenewals holds leases cells on a node with a short TTL for a few
// renewal intervals and returns the requests the node sent per interval
// (its node-lease renewal and its peer LIST), counted at the proxy.
func deedRenewals(ctx context.Context, b bucket.Bucket, px *proxy, leases int, delay time.Duration) (float64, error) {
	ttl := max(30*delay, owner.MinTTL) // the shortest TTL a node accepts
	// The count is sampled when each renewal's PUT has answered: between
	// two samples lie whole renewal intervals (a PUT and the LIST after it).
	var mu sync.Mutex
	var samples []int64
	hooks := owner.Hooks{Renew: func(result string) {
		if result == "ok" {
			mu.Lock()
			samples = append(samples, px.count("renew/nodes"))
			mu.Unlock()
		}
	}}
	// No record watch: the row is about renewal, which the daemon pays
	// (it turns the watch off); the watch's GET per held cell is priced
	// in the cost model of docs/performance.md.
	node, err := owner.NewNode(bucket.WithPrefix(b, "renew"), owner.Config{Name: "renewer", TTL: ttl, Hooks: hooks, WatchInterval: -1})
	if err != nil {
		return 0, err
	}
	defer func() {
		// Released side by side: Close would release them one by one.
		held := node.Held()
		_ = parallel(len(held), func(i int) error { return held[i].Release(ctx) })
		node.Close(context.WithoutCancel(ctx))
	}()
	// Claimed before the node opens, side by side, to keep the row short
	// and the renewals it measures undisturbed; what the node renews does
	// not depend on what it holds.
	if err := parallel(leases, func(i int) error {
		_, err := node.Claim(ctx, fmt.Sprintf("cell-%d", i), owner.ClaimOptions{})
		return err
	}); err != nil {
		return 0, err
	}
	if err := node.Open(ctx); err != nil {
		return 0, err
	}
	mu.Lock()
	first := len(samples)
	mu.Unlock()
	const intervals = 8
	time.Sleep((intervals + 2) * ttl / 3)
	if held := len(node.Held()); held != leases || node.Err() != nil {
		return 0, fmt.Errorf("held %d of %d leases (%v)", held, leases, node.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(samples) < first+intervals+1 {
		return 0, fmt.Errorf("only %d renewals in %v", len(samples)-first, (intervals+2)*ttl/3)
	}
	return float64(samples[first+intervals]-samples[first]) / intervals, nil
}

// parallel runs f(0..n-1), 64 at a time, and returns one of their errors.
func parallel(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	var failed atomic.Value
	sem := make(chan struct{}, 64)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(i); err != nil {
				failed.Store(err)
			}
		}()
	}
	wg.Wait()
	err, _ := failed.Load().(error)
	return err
}

// litestreamRenewal returns the requests one RenewLease sends.
func litestreamRenewal(ctx context.Context, px *proxy, client *awss3.Client) (float64, error) {
	l := newLeaser(client, "litestream/cells/renew")
	lease, err := l.AcquireLease(ctx)
	if err != nil {
		return 0, err
	}
	before := px.count("litestream/cells")
	if lease, err = l.RenewLease(ctx, lease); err != nil {
		return 0, err
	}
	n := px.count("litestream/cells") - before
	return float64(n), l.ReleaseLease(ctx, lease)
}

type deedLocker struct {
	node *owner.Node
	held map[string]*owner.Lease
}

func (d *deedLocker) acquire(ctx context.Context, key string) error {
	l, err := d.node.Claim(ctx, cellOf(key), owner.ClaimOptions{})
	d.held[key] = l
	return err
}

func (d *deedLocker) release(ctx context.Context, key string) error {
	return d.held[key].Release(ctx)
}

// cellOf maps "deed/cells/x" to the cell name "x" (deed adds cells/).
func cellOf(key string) string { return key[strings.LastIndex(key, "/")+1:] }

type litestreamLocker struct {
	client *awss3.Client
	held   map[string]*litestream.Lease
}

func newLeaser(client *awss3.Client, path string) *lss3.Leaser {
	l := lss3.NewLeaser()
	l.SetLogger(slog.New(slog.DiscardHandler))
	l.SetClient(client)
	l.Bucket, l.Path, l.Owner = storeBucket, path, "bench"
	return l
}

func (s *litestreamLocker) acquire(ctx context.Context, key string) error {
	lease, err := newLeaser(s.client, key).AcquireLease(ctx)
	s.held[key] = lease
	return err
}

func (s *litestreamLocker) release(ctx context.Context, key string) error {
	return newLeaser(s.client, key).ReleaseLease(ctx, s.held[key])
}

type sets3Locker struct {
	client *awss3.Client
	held   map[string]*sets3lock.Locker
}

func (s *sets3Locker) acquire(ctx context.Context, key string) error {
	l, err := sets3lock.New(ctx, "s3://"+storeBucket+"/"+key, sets3lock.WithAPIClient(s.client), sets3lock.WithDelay(false), sets3lock.WithNoPanic())
	if err != nil {
		return err
	}
	ok, err := l.LockWithErr(ctx)
	if err == nil && !ok {
		err = fmt.Errorf("lock %s not granted", key)
	}
	s.held[key] = l
	return err
}

func (s *sets3Locker) release(ctx context.Context, key string) error {
	return s.held[key].UnlockWithErr(ctx)
}

// modVersion is the version of a dependency this binary was built with.
func modVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == path {
				return m.Version
			}
		}
	}
	return "(unknown version)"
}

// thousands formats v rounded, with thousands separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
