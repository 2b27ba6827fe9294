package replication

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/internal/wait"
)

// Defaults for Options.
const (
	DefaultMaxBatchRecords = 4096
	DefaultMaxBatchBytes   = 4 << 20
	DefaultRequestTimeout  = 10 * time.Second
)

// readAttempts bounds how often one read is retried on a transient store
// error before the operation fails with DEED-E011. The resolution of an
// ambiguous write is not bounded by it: a writer retries its slot until the
// outcome is known or its context ends.
const readAttempts = 8

type config struct {
	maxBatchRecords int
	maxBatchBytes   int
	requestTimeout  time.Duration
	backoffMin      time.Duration
	backoffMax      time.Duration
	logger          *slog.Logger
	indexLen        int
	onCommit        func(records, puts int)
	keyWindow       time.Duration
	keyLimit        int
	// shared is the configuration a Shared option built, which a store
	// given only that option points to instead of keeping a copy.
	shared *config
}

func defaults() config {
	return config{
		maxBatchRecords: DefaultMaxBatchRecords,
		maxBatchBytes:   DefaultMaxBatchBytes,
		requestTimeout:  DefaultRequestTimeout,
		backoffMin:      10 * time.Millisecond,
		backoffMax:      time.Second,
		logger:          slog.New(slog.DiscardHandler),
		indexLen:        1 << 16,
		keyWindow:       DefaultKeyWindow,
		keyLimit:        DefaultKeyLimit,
	}
}

// Option configures Open, Read, Restore and GC.
type Option func(*config)

// WithMaxBatch bounds one group commit: at most records records and about
// bytes bytes of payload per transaction file (a single larger record still
// goes alone). Zero keeps the default; bytes is capped at MaxFileLen/2, so
// that a batch of records that each fit a file also fits one.
func WithMaxBatch(records, bytes int) Option {
	return func(c *config) {
		if records > 0 {
			c.maxBatchRecords = records
		}
		if bytes > 0 {
			c.maxBatchBytes = min(bytes, MaxFileLen/2)
		}
	}
}

// WithRequestTimeout bounds every single request to the bucket (default
// 10s). A write that times out is ambiguous and is resolved by reading the
// slot back; it is never reported as lost.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.requestTimeout = d
		}
	}
}

// WithBackoff sets the retry backoff range (default 10ms to 1s).
func WithBackoff(lo, hi time.Duration) Option {
	return func(c *config) {
		if lo > 0 {
			c.backoffMin = lo
		}
		if hi >= c.backoffMin {
			c.backoffMax = hi
		}
	}
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithCommitObserver calls f after each transaction file of records is
// durable, with the number of records in it (the group-commit batch) and
// the PUT attempts it took (more than 1 when a write failed or its outcome
// was unknown and it was sent again). f runs on the log's writer and must
// not block; the daemon feeds its metrics from it.
func WithCommitObserver(f func(records, puts int)) Option {
	return func(c *config) { c.onCommit = f }
}

// Shared returns one Option that stands for opts, built once: every log
// opened (and every Read, Restore or GC run) with it as its only option
// points to that one configuration instead of keeping its own copy. A
// process that holds many logs with the same options (a daemon holds one
// per cell, tens of thousands) builds them once with Shared; the saving is
// about 64 bytes per log. Options given after it apply to a copy of its
// configuration, as usual.
func Shared(opts ...Option) Option {
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	cfg.shared = nil
	p := &cfg
	return func(c *config) {
		*c = *p
		c.shared = p
	}
}

// store is the slot I/O every part of the package shares: reads that retry
// transient errors, and create-only writes that resolve ambiguity by reading
// the key back.
type store struct {
	b    bucket.Bucket
	cell string
	cfg  *config // never modified: it may be shared (see Shared)
}

func newStore(b bucket.Bucket, cell string, opts []Option) *store {
	s := makeStore(b, cell, opts)
	return &s
}

// makeStore is newStore for a Log, which keeps its store inline (one
// allocation less per held cell).
func makeStore(b bucket.Bucket, cell string, opts []Option) store {
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	if len(opts) == 1 && cfg.shared != nil {
		return store{b: b, cell: cell, cfg: cfg.shared}
	}
	return store{b: b, cell: cell, cfg: &cfg}
}

// backoff is the pause before retry attempt i (0-based), with ±25% jitter.
func (s *store) backoff(i int) time.Duration {
	return wait.Backoff{Min: s.cfg.backoffMin, Max: s.cfg.backoffMax, Jitter: true}.Delay(i)
}

// final reports the errors retrying cannot change: a permanent refusal, or
// an answer about the key itself (missing, precondition, too large).
func final(err error) bool {
	return bucket.Permanent(err) || errors.Is(err, bucket.ErrNotFound) || errors.Is(err, bucket.ErrPrecondition) || errors.Is(err, bucket.ErrTooLarge)
}

// retry runs op until it succeeds, fails permanently, or attempts run out
// (attempts ≤ 0: until ctx ends). Each attempt gets its own timeout.
func (s *store) retry(ctx context.Context, attempts int, op func(ctx context.Context) error) error {
	return wait.Retry(ctx, attempts, wait.Backoff{Min: s.cfg.backoffMin, Max: s.cfg.backoffMax, Jitter: true}, final, func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
		defer cancel()
		return op(actx)
	})
}

// get reads key; found is false when it does not exist. An object over
// MaxFileLen is DEED-E031 (matching bucket.ErrTooLarge), refused before its
// body is read.
func (s *store) get(ctx context.Context, key string) (body []byte, found bool, err error) {
	err = s.retry(ctx, readAttempts, func(ctx context.Context) error {
		obj, err := s.b.Get(ctx, key, MaxFileLen)
		body = obj.Body
		return err
	})
	switch {
	case err == nil:
		return body, true, nil
	case errors.Is(err, bucket.ErrNotFound):
		return nil, false, nil
	case errors.Is(err, bucket.ErrTooLarge):
		return nil, false, errcode.Errorf(errcode.CodeCorruptTx, "corrupt transaction file %s: %w", key, err)
	}
	return nil, false, errcode.Wrap(err, "read %s", key)
}

// read reads and decodes key; f is nil when it does not exist.
func (s *store) read(ctx context.Context, key string) (f *File, body []byte, err error) {
	body, found, err := s.get(ctx, key)
	if err != nil || !found {
		return nil, nil, err
	}
	f, err = Decode(key, body)
	return f, body, err
}

// head reports whether key exists.
func (s *store) head(ctx context.Context, key string) (bool, error) {
	err := s.retry(ctx, readAttempts, func(ctx context.Context) error {
		_, err := s.b.Head(ctx, key)
		return err
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, bucket.ErrNotFound):
		return false, nil
	}
	return false, errcode.Wrap(err, "head %s", key)
}

// list returns every key under prefix (following pages), retrying
// transient errors.
func (s *store) list(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	all, err := bucket.ListAll(ctx, retryingList{s.b, s}, in)
	if err != nil {
		return all, errcode.Wrap(err, "list %s", in.Prefix)
	}
	return all, nil
}

// retryingList is the store's bucket whose List retries each page's
// transient errors, for bucket.ListAll to follow the pages.
type retryingList struct {
	bucket.Bucket
	s *store
}

func (r retryingList) List(ctx context.Context, in bucket.ListInput) (page bucket.ListPage, err error) {
	err = r.s.retry(ctx, readAttempts, func(ctx context.Context) error {
		page, err = r.s.b.List(ctx, in)
		return err
	})
	return page, err
}

// create writes body at key create-only (If-None-Match: *) and learns the
// outcome for certain. It returns (nil, nil) when body is at key — written
// now or by an earlier attempt whose response was lost — and the file found
// there when someone else's bytes hold the key.
//
// Every outcome other than success or 412 (timeouts, 5xx, 409, a dropped
// connection) is resolved by reading the key back, never by guessing: our
// bytes → landed; other bytes → theirs; missing → write the same bytes
// again after a backoff. It gives up only when ctx ends, with DEED-E012:
// the write may still land, and the caller must not report it as refused.
func (s *store) create(ctx context.Context, key string, body []byte) (theirs *File, err error) {
	theirs, _, err = s.createCounted(ctx, key, body)
	return theirs, err
}

// createCounted is create that also returns how many PUTs it sent.
func (s *store) createCounted(ctx context.Context, key string, body []byte) (theirs *File, puts int, err error) {
	got, puts, err := s.createRaw(ctx, key, body)
	if err != nil || got == nil {
		return nil, puts, err
	}
	if brokenNoReadBack {
		return got.file, puts, nil
	}
	f, err := Decode(key, got.body)
	return f, puts, err
}

// other is what create found at its key instead of its own bytes: the raw
// body, or (brokenNoReadBack) a file already decoded.
type other struct {
	body []byte
	file *File
}

// createRaw is create without decoding: theirs holds the bytes found at key
// when they are not body; puts counts the PUTs it sent.
func (s *store) createRaw(ctx context.Context, key string, body []byte) (theirs *other, puts int, err error) {
	var last error
	for i := 0; ; i++ {
		if i > 0 {
			if serr := wait.Sleep(ctx, s.backoff(i-1)); serr != nil {
				return nil, puts, errcode.Errorf(errcode.CodeAmbiguous, "write %s: outcome unknown: %v (last error: %w)", key, serr, last)
			}
		}
		actx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
		puts++
		_, err := s.b.Put(actx, key, body, bucket.IfAbsent)
		cancel()
		if err == nil {
			return nil, puts, nil
		}
		if bucket.Permanent(err) {
			return nil, puts, errcode.Wrap(err, "write %s", key)
		}
		if brokenNoReadBack {
			f, err := s.trustTypedError(ctx, key, err)
			if err != nil || f == nil {
				return nil, puts, err
			}
			return &other{file: f}, puts, nil
		}
		last = err
		// 412 (someone's bytes are there) or an unknown outcome: read back.
		got, found, rerr := s.get(ctx, key)
		switch {
		case errors.Is(rerr, bucket.ErrTooLarge):
			return nil, puts, rerr // someone else's bytes, and not a file: DEED-E031
		case rerr != nil:
			last = rerr
			if bucket.Permanent(rerr) {
				return nil, puts, errcode.Errorf(errcode.CodeAmbiguous, "write %s: outcome unknown: %v (read back: %w)", key, err, rerr)
			}
			continue
		case !found:
			// Not there: the write did not land (yet). Same bytes again.
			s.cfg.logger.Debug("slot write did not land; retrying", "key", key, "err", err)
			continue
		case bytes.Equal(got, body):
			return nil, puts, nil
		}
		return &other{body: got}, puts, nil
	}
}
