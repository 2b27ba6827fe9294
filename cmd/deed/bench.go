package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/internal/nonce"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// benchFlags are `deed bench`'s own flags.
type benchFlags struct {
	prefix    string
	duration  time.Duration
	ops       int
	appenders int
	claimers  int
	size      int
}

func newBenchCmd(cfg *config) *cobra.Command {
	var bf benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a bucket: conditional PUT and GET latency, claims/s, appends/s",
		Long: `bench measures, against the bucket you point it at, the operations deed is
made of, in four phases run one after the other:

  put      create-only PUTs (If-None-Match: *) of new keys, one at a time
  get      GETs of those keys, one at a time
  claim    claims of fresh cells (a GET and a conditional PUT each) by
           --claimers concurrent claimers
  append   appends to one cell's log by --appenders concurrent appenders,
           group-committed: one transaction file per PUT, one PUT in flight

and reports latency percentiles (p50, p99), rates, and the claim and append
latencies in units of the PUT p50 — the round trips they cost. Each phase
stops after --duration or after --ops operations, whichever comes first.

It works only under its own scratch prefix inside the bucket (default
deed-bench/<random>), refuses one that is not empty, and deletes everything
it wrote there before it exits, even when interrupted. On a terminal it
shows its progress; --json prints one JSON summary instead of the table.`,
		Example: `  deed bench --bucket s3://my-bucket
  deed bench --bucket s3://my-bucket --endpoint https://ACCOUNT.r2.cloudflarestorage.com --duration 30s
  deed bench --bucket s3://deed --endpoint http://127.0.0.1:7070 --ops 200 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bf.check(); err != nil {
				return err
			}
			ctx := cmd.Context()
			b, loc, err := cfg.openBucket(ctx)
			if err != nil {
				return err
			}
			rep, err := runBench(ctx, b, bf, newProgress(cfg.inv.Stdout, !cfg.json), cfg.log)
			rep.Bucket = cfg.describe(loc)
			if rep.Started.IsZero() {
				return err // refused before anything was written
			}
			if cfg.json {
				writeJSON(cfg.inv.Stdout, rep)
			} else {
				rep.writeText(cfg.inv.Stdout)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&bf.prefix, "prefix", "", "scratch prefix inside the bucket; must be empty (default deed-bench/<random>)")
	f.DurationVar(&bf.duration, "duration", 5*time.Second, "run each phase at most this long (0: no limit, --ops must be set)")
	f.IntVar(&bf.ops, "ops", 0, "stop each phase after this many operations (0: no limit, --duration must be set)")
	f.IntVar(&bf.appenders, "appenders", 16, "concurrent appenders in the append phase")
	f.IntVar(&bf.claimers, "claimers", 4, "concurrent claimers in the claim phase")
	f.IntVar(&bf.size, "size", 100, "size of each PUT body and appended record, in bytes")
	return cmd
}

// maxBenchSize bounds --size: a record, not a bulk upload.
const maxBenchSize = 1 << 20

func (bf *benchFlags) check() error {
	switch {
	case bf.duration < 0 || bf.ops < 0:
		return errcode.Errorf(errcode.CodeBadRequest, "bench: --duration and --ops must not be negative")
	case bf.duration == 0 && bf.ops == 0:
		return errcode.Errorf(errcode.CodeBadRequest, "bench: set --duration or --ops, or each phase would never end")
	case bf.appenders < 1 || bf.claimers < 1:
		return errcode.Errorf(errcode.CodeBadRequest, "bench: --appenders and --claimers must be at least 1")
	case bf.size < 1 || bf.size > maxBenchSize:
		return errcode.Errorf(errcode.CodeBadRequest, "bench: --size must be 1..%d bytes", maxBenchSize)
	}
	bf.prefix = strings.Trim(bf.prefix, "/")
	if bf.prefix == "" {
		bf.prefix = "deed-bench/" + nonce.Hex(6)
	}
	if err := bucket.ValidateKey(bf.prefix + "/x"); err != nil {
		return errcode.Errorf(errcode.CodeBadRequest, "bench: --prefix: %w", err)
	}
	return nil
}

// benchStats summarises one phase.
type benchStats struct {
	Ops     int     `json:"ops"`
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"per_second"`
	MeanMS  float64 `json:"mean_ms"`
	P50MS   float64 `json:"p50_ms"`
	P99MS   float64 `json:"p99_ms"`
	// Workers is the phase's concurrency.
	Workers int `json:"workers"`
	// PutRTTs is the p50 latency in units of the conditional PUT's p50: the
	// round trips an operation costs (claim and append only).
	PutRTTs float64 `json:"put_rtts,omitempty"`
	// RecordsPerPut is the group-commit batch: appends per slot PUT
	// (append only).
	RecordsPerPut float64 `json:"records_per_put,omitempty"`
}

// benchReport is `deed bench`'s result.
type benchReport struct {
	Bucket  string      `json:"bucket"`
	Prefix  string      `json:"prefix"`
	Size    int         `json:"size"`
	Started time.Time   `json:"started"`
	Put     *benchStats `json:"conditional_put,omitempty"`
	Get     *benchStats `json:"get,omitempty"`
	Claim   *benchStats `json:"claim,omitempty"`
	Append  *benchStats `json:"append,omitempty"`
	// Deleted is how many keys the cleanup deleted; Clean reports that the
	// scratch prefix listed empty afterwards.
	Deleted int  `json:"deleted"`
	Clean   bool `json:"clean"`
}

func (r *benchReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "deed bench: %s (scratch prefix %s, %d-byte bodies)\n", r.Bucket, r.Prefix, r.Size)
	row := func(name string, s *benchStats, unit, extra string) {
		if s == nil {
			return
		}
		fmt.Fprintf(w, "  %-16s %7d %-8s %9.1f/s   p50 %8.2f ms   p99 %8.2f ms%s\n", name, s.Ops, unit, s.PerSec, s.P50MS, s.P99MS, extra)
	}
	row("conditional PUT", r.Put, "ops", "")
	row("GET", r.Get, "ops", "")
	if r.Claim != nil {
		row("claim", r.Claim, "claims", fmt.Sprintf("   = %.1f PUT RTTs (%d claimers)", r.Claim.PutRTTs, r.Claim.Workers))
	}
	if r.Append != nil {
		row("append", r.Append, "appends", fmt.Sprintf("   = %.1f PUT RTTs (%d appenders, %.1f records/PUT)",
			r.Append.PutRTTs, r.Append.Workers, r.Append.RecordsPerPut))
	}
	state := "the scratch prefix lists empty"
	if !r.Clean {
		state = "the scratch prefix is NOT empty"
	}
	fmt.Fprintf(w, "cleanup: deleted %d key(s); %s\n", r.Deleted, state)
}

// runBench runs the phases under bf.prefix of b and cleans up. The report
// has a zero Started when the bench was refused before writing anything.
func runBench(ctx context.Context, b bucket.Bucket, bf benchFlags, pr *progress, log *slog.Logger) (benchReport, error) {
	rep := benchReport{Prefix: bf.prefix, Size: bf.size}
	sb := bucket.WithPrefix(b, bf.prefix)
	page, err := sb.List(ctx, bucket.ListInput{MaxKeys: 1})
	if err != nil {
		return rep, errcode.Wrap(err, "bench: list scratch prefix %s", bf.prefix)
	}
	if len(page.Objects) > 0 {
		return rep, errcode.Errorf(errcode.CodeBadRequest, "bench: scratch prefix %s/ is not empty (first key %q): choose an empty one",
			bf.prefix, page.Objects[0].Key)
	}
	rep.Started = time.Now()
	runErr := runPhases(ctx, sb, bf, pr, &rep)
	rep.Deleted, rep.Clean, err = cleanScratch(ctx, sb, pr)
	if err != nil {
		log.Warn("bench cleanup incomplete", "prefix", bf.prefix, "err", err)
		if runErr == nil {
			runErr = errcode.Wrap(err, "bench: clean up %s", bf.prefix)
		}
	}
	return rep, runErr
}

func runPhases(ctx context.Context, b bucket.Bucket, bf benchFlags, pr *progress, rep *benchReport) error {
	body := func() []byte {
		p := make([]byte, bf.size)
		_, _ = rand.Read(p)
		return p
	}

	var written atomic.Int64
	put, err := runPhase(ctx, "put", 1, bf, pr, func(ctx context.Context, i int) error {
		if _, err := b.Put(ctx, fmt.Sprintf("put/%08d", i), body(), bucket.IfAbsent); err != nil {
			return err
		}
		written.Add(1)
		return nil
	})
	rep.Put = put
	if err != nil {
		return errcode.Wrap(err, "bench: conditional put")
	}

	if n := int(written.Load()); n > 0 {
		rep.Get, err = runPhase(ctx, "get", 1, bf, pr, func(ctx context.Context, i int) error {
			_, err := b.Get(ctx, fmt.Sprintf("put/%08d", i%n), 0) // its own objects
			return err
		})
		if err != nil {
			return errcode.Wrap(err, "bench: get")
		}
	}

	// A node that never opens a node lease: claims of fresh cells need no
	// liveness, and the bench leaves no node lease behind.
	node, err := owner.NewNode(b, owner.Config{Name: "deed-bench"})
	if err != nil {
		return err
	}
	rep.Claim, err = runPhase(ctx, "claim", bf.claimers, bf, pr, func(ctx context.Context, i int) error {
		_, err := node.Claim(ctx, fmt.Sprintf("claim-%08d", i), owner.ClaimOptions{})
		return err
	})
	rep.Claim.PutRTTs = rtts(rep.Claim, rep.Put)
	if err != nil {
		return errcode.Wrap(err, "bench: claim")
	}

	puts := &putCounter{Bucket: b}
	lease, err := node.Claim(ctx, "append", owner.ClaimOptions{})
	if err != nil {
		return errcode.Wrap(err, "bench: append")
	}
	lg, err := replication.Open(ctx, puts, lease)
	if err != nil {
		return errcode.Wrap(err, "bench: append")
	}
	rec := body()
	puts.n.Store(0)
	rep.Append, err = runPhase(ctx, "append", bf.appenders, bf, pr, func(ctx context.Context, _ int) error {
		_, err := lg.Append(ctx, lease, rec)
		return err
	})
	if n := puts.n.Load(); n > 0 {
		rep.Append.RecordsPerPut = float64(rep.Append.Ops) / float64(n)
	}
	rep.Append.PutRTTs = rtts(rep.Append, rep.Put)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = lg.Close(cctx) // stops the writer; the seal is deleted with the rest
	if err != nil {
		return errcode.Wrap(err, "bench: append")
	}
	return nil
}

// rtts is s's p50 in units of the conditional PUT's p50.
func rtts(s, put *benchStats) float64 {
	if s == nil || put == nil || put.P50MS == 0 {
		return 0
	}
	return s.P50MS / put.P50MS
}

// putCounter counts the PUTs sent through it.
type putCounter struct {
	bucket.Bucket
	n atomic.Int64
}

func (p *putCounter) Put(ctx context.Context, key string, body []byte, cond bucket.Condition) (string, error) {
	p.n.Add(1)
	return p.Bucket.Put(ctx, key, body, cond)
}

// runPhase runs op from workers goroutines until bf.duration has passed or
// bf.ops operations were started, and summarises their latencies. The
// first error stops the phase; the stats cover what completed.
func runPhase(parent context.Context, name string, workers int, bf benchFlags, pr *progress, op func(context.Context, int) error) (*benchStats, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var (
		next     atomic.Int64
		done     atomic.Int64
		mu       sync.Mutex
		lat      []time.Duration
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	var deadline time.Time
	if bf.duration > 0 {
		deadline = start.Add(bf.duration)
	}
	pr.begin(name, &done, start)
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if (bf.ops > 0 && i >= bf.ops) || (!deadline.IsZero() && !time.Now().Before(deadline)) {
					return
				}
				t0 := time.Now()
				err := op(ctx, i)
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					if firstErr == nil && ctx.Err() == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
				lat = append(lat, d)
				mu.Unlock()
				done.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	pr.end()
	if firstErr == nil && parent.Err() != nil {
		firstErr = errcode.Errorf(errcode.CodeUnavailable, "interrupted: %w", parent.Err())
	}
	return summarise(lat, elapsed, workers), firstErr
}

func summarise(lat []time.Duration, elapsed time.Duration, workers int) *benchStats {
	s := &benchStats{Ops: len(lat), Seconds: elapsed.Seconds(), Workers: workers}
	if len(lat) == 0 {
		return s
	}
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	s.PerSec = float64(len(lat)) / elapsed.Seconds()
	s.MeanMS = ms(sum / time.Duration(len(lat)))
	s.P50MS = ms(lat[len(lat)*50/100])
	s.P99MS = ms(lat[min(len(lat)-1, len(lat)*99/100)])
	return s
}

// cleanScratch deletes every key under the scratch prefix (b is scoped to
// it) and lists it again to check it is empty. It runs with its own
// deadline, so an interrupted bench still cleans up.
func cleanScratch(ctx context.Context, b bucket.Bucket, pr *progress) (deleted int, clean bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	var done atomic.Int64
	pr.begin("cleanup", &done, time.Now())
	defer pr.end()
	for pass := 0; pass < 3; pass++ {
		page, lerr := bucket.ListAll(ctx, b, bucket.ListInput{})
		if lerr != nil {
			return deleted, false, lerr
		}
		if len(page.Objects) == 0 {
			return deleted, true, err
		}
		keys := make(chan string)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 16 {
			wg.Go(func() {
				for k := range keys {
					derr := b.Delete(ctx, k, bucket.None)
					mu.Lock()
					if derr == nil {
						deleted++
						done.Add(1)
					} else if err == nil {
						err = derr
					}
					mu.Unlock()
				}
			})
		}
		for _, o := range page.Objects {
			keys <- o.Key
		}
		close(keys)
		wg.Wait()
	}
	page, lerr := bucket.ListAll(ctx, b, bucket.ListInput{MaxKeys: 1})
	if lerr != nil {
		return deleted, false, lerr
	}
	if len(page.Objects) > 0 && err == nil {
		err = fmt.Errorf("%d key(s) left, first %q", len(page.Objects), page.Objects[0].Key)
	}
	return deleted, len(page.Objects) == 0, err
}

// progress shows a one-line, self-overwriting status of the running phase
// on a terminal, and nothing anywhere else.
type progress struct {
	w    io.Writer
	on   bool
	stop chan struct{}
	wg   sync.WaitGroup
}

// isTerminal reports whether w is a terminal. A variable so that tests can
// pretend.
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressEvery is how often the progress line is redrawn.
const progressEvery = 200 * time.Millisecond

func newProgress(w io.Writer, wanted bool) *progress {
	return &progress{w: w, on: wanted && isTerminal(w)}
}

func (p *progress) begin(phase string, done *atomic.Int64, start time.Time) {
	if !p.on {
		return
	}
	p.stop = make(chan struct{})
	p.wg.Go(func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			n := done.Load()
			secs := time.Since(start).Seconds()
			fmt.Fprintf(p.w, "\r\033[K%-8s %8d done  %6.1f s  %8.1f/s", phase, n, secs, float64(n)/max(secs, 1e-9))
			select {
			case <-p.stop:
				fmt.Fprint(p.w, "\r\033[K")
				return
			case <-t.C:
			}
		}
	})
}

func (p *progress) end() {
	if !p.on || p.stop == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	p.stop = nil
}
