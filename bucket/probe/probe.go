// Package probe is the conformance probe: it checks that a store honours the
// conditional-write contract deed depends on.
//
// deed's safety rests on one property of the store: a conditional write is
// atomic, and a write whose condition fails changes nothing. Some stores
// accept If-None-Match / If-Match and silently ignore them; on such a store
// every promise of docs/design.md is void, and nothing would tell the operator.
// Run exercises the contract in a scratch prefix and says, in one report,
// whether the store can be trusted, which quirks it has (404 vs 412 for
// If-Match on a missing key, conditional DELETE support, ETag quoting), and
// how long each step took. The daemon runs it at start; `deed probe` runs it
// on demand.
//
// Run returns a Report (JSON-ready); rendering it for people is the
// caller's (the CLI's) business.
package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/internal/nonce"
	"github.com/deedkit/deed/internal/wait"
)

// Check names, in the order they run.
const (
	CheckCreate         = "create"
	CheckETag           = "etag"
	CheckCreateRejected = "create-rejected"
	CheckUpdate         = "update"
	CheckUpdateStale    = "update-stale"
	CheckIfMatchMissing = "if-match-missing"
	CheckDelete         = "conditional-delete"
	CheckListAfterWrite = "list-after-write"
	CheckRace           = "race"
	CheckCleanup        = "cleanup"
)

// DefaultRacers is how many concurrent creates the race check sends by
// default: enough to overlap on any real store, few enough for a laptop.
const DefaultRacers = 32

// Options configures Run. The zero value is ready to use.
type Options struct {
	// Prefix is the scratch prefix, relative to b, under which every probe
	// key is written. It must be empty: Run lists it first and refuses
	// (DEED-E040) to work among keys it did not write. Default
	// "deed-probe/<random>", random so that concurrent probes of one bucket
	// cannot interfere.
	Prefix string
	// Racers is the number of concurrent creates in the race check
	// (default DefaultRacers; at least 2).
	Racers int
}

// Verdict is the probe's overall outcome.
type Verdict string

// The verdicts.
const (
	// VerdictPass: every check passed.
	VerdictPass Verdict = "pass"
	// VerdictWarn: the contract holds, but the store lacks something deed
	// can work without (today: conditional DELETE).
	VerdictWarn Verdict = "warn"
	// VerdictFail: the store breaks the conditional-write contract
	// (DEED-E010). deed must not run on it.
	VerdictFail Verdict = "fail"
	// VerdictError: the probe could not finish (transient store error,
	// access denied, cancelled) and concluded nothing.
	VerdictError Verdict = "error"
)

// Check is the result of one check. OK with Warning set means the check
// passed with a caveat; !OK means the store failed it, unless Inconclusive
// says the check could not run to the end (a transient error, which says
// nothing about the contract).
type Check struct {
	Name         string        `json:"name"`
	OK           bool          `json:"ok"`
	Warning      bool          `json:"warning,omitempty"`
	Inconclusive bool          `json:"inconclusive,omitempty"`
	Detail       string        `json:"detail"`
	Duration     time.Duration `json:"-"`
}

// Quirks is what the probe learned about the store's dialect; the S3
// client's quirks table is the place that acts on these.
type Quirks struct {
	// IfMatchMissingStatus is the HTTP status the store answered a PUT with
	// If-Match on a missing key: 404 (AWS) or 412. 0 if not observed (the
	// in-memory fake reports the status it simulates).
	IfMatchMissingStatus int `json:"if_match_missing_status,omitempty"`
	// ConditionalDelete reports whether DELETE honours If-Match.
	ConditionalDelete bool `json:"conditional_delete"`
	// ListAfterWrite reports whether a LIST right after a PUT showed the
	// new object, and one right after a DELETE no longer did.
	ListAfterWrite bool `json:"list_after_write"`
	// QuotedETags reports whether the store returns ETags in double quotes.
	QuotedETags bool `json:"quoted_etags"`
	// Observed lists the IDs of the rows of the bucket.Quirks table the store
	// showed during the probe, so a report can be read against the table.
	Observed []string `json:"observed,omitempty"`
}

func (q *Quirks) observe(id string) {
	for _, x := range q.Observed {
		if x == id {
			return
		}
	}
	q.Observed = append(q.Observed, id)
}

// Report is the outcome of Run: one entry per check that ran, the
// store's quirks and an overall verdict.
type Report struct {
	// Bucket names the probed store for display; Run leaves it empty and
	// callers (the CLI) fill it in.
	Bucket   string        `json:"bucket,omitempty"`
	Prefix   string        `json:"prefix"`
	Verdict  Verdict       `json:"verdict"`
	OK       bool          `json:"ok"`
	Code     errcode.Code  `json:"code,omitempty"`
	Error    string        `json:"error,omitempty"`
	Racers   int           `json:"racers"`
	Quirks   Quirks        `json:"quirks"`
	Checks   []Check       `json:"checks"`
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"-"`
}

// Warnings counts the checks that passed with a caveat.
func (r Report) Warnings() int {
	n := 0
	for _, c := range r.Checks {
		if c.Warning {
			n++
		}
	}
	return n
}

// Failed returns the checks that did not pass.
func (r Report) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// Check returns the named check, if it ran.
func (r Report) Check(name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// Durations travel in JSON as fractional milliseconds ("duration_ms"): a
// time.Duration would marshal as opaque nanoseconds.

type probeCheckJSON struct {
	probeCheckAlias
	DurationMS float64 `json:"duration_ms"`
}

type probeCheckAlias Check

// MarshalJSON adds duration_ms.
func (c Check) MarshalJSON() ([]byte, error) {
	return json.Marshal(probeCheckJSON{probeCheckAlias(c), millis(c.Duration)})
}

// UnmarshalJSON reads duration_ms back.
func (c *Check) UnmarshalJSON(b []byte) error {
	var v probeCheckJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*c = Check(v.probeCheckAlias)
	c.Duration = fromMillis(v.DurationMS)
	return nil
}

type probeReportAlias Report

type probeReportJSON struct {
	probeReportAlias
	DurationMS float64 `json:"duration_ms"`
}

// MarshalJSON adds duration_ms.
func (r Report) MarshalJSON() ([]byte, error) {
	return json.Marshal(probeReportJSON{probeReportAlias(r), millis(r.Duration)})
}

// UnmarshalJSON reads duration_ms back.
func (r *Report) UnmarshalJSON(b []byte) error {
	var v probeReportJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = Report(v.probeReportAlias)
	r.Duration = fromMillis(v.DurationMS)
	return nil
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func fromMillis(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// Run checks that b honours the conditional-write contract, in a scratch
// prefix that it cleans up afterwards.
//
// It returns the report and:
//   - nil when every check passed (possibly with warnings);
//   - a *errcode.Error with errcode.CodeContract (DEED-E010) when the store broke the
//     contract: a rejected write landed, a race had more than one winner, or
//     conditional writes are refused outright;
//   - a *errcode.Error with errcode.CodeUnavailable (DEED-E011) when a transient store error
//     (or an outcome the probe cannot interpret) kept it from concluding,
//     errcode.CodeUnauthorized (DEED-E041) for denied access, errcode.CodeBadRequest
//     (DEED-E040) for invalid options or a scratch prefix that is not
//     empty (checked with one LIST before anything is written).
//
// A contract failure wins over a later transient error: once the store has
// shown it ignores a condition, nothing else matters. Checks after a failure
// still run so the report shows everything that is wrong; a transient error
// stops the remaining checks. Cleanup always runs, with its own deadline, so
// a cancelled ctx does not strand the scratch keys.
func Run(ctx context.Context, b bucket.Bucket, opts Options) (Report, error) {
	if opts.Racers == 0 {
		opts.Racers = DefaultRacers
	}
	prefix := strings.Trim(opts.Prefix, "/")
	if prefix == "" {
		prefix = "deed-probe/" + nonce.Hex(6)
	}
	r := Report{Prefix: prefix, Racers: opts.Racers, Started: time.Now()}
	if opts.Racers < 2 {
		return r.finish(errcode.Errorf(errcode.CodeBadRequest, "probe: racers %d: need at least 2", opts.Racers))
	}
	if err := bucket.ValidateKey(prefix + "/x"); err != nil {
		return r.finish(errcode.Errorf(errcode.CodeBadRequest, "probe: scratch prefix: %w", err))
	}
	p := &prober{b: bucket.WithPrefix(b, prefix), id: nonce.Hex(4), racers: opts.Racers, written: map[string]bool{}, report: &r}
	// The probe deletes what it wrote; an empty prefix guarantees that
	// nothing else is there to be confused with it.
	if existing, err := listRetry(ctx, p.b); err != nil {
		return r.finish(probeError("list scratch prefix "+prefix, err))
	} else if len(existing) > 0 {
		return r.finish(errcode.Errorf(errcode.CodeBadRequest, "probe: scratch prefix %s/ is not empty (%d key(s), first %q): choose an empty one",
			prefix, len(existing), existing[0]))
	}

	abortErr := p.runChecks(ctx)
	cleanupErr := p.cleanup(ctx)

	var err error
	switch {
	case len(r.Failed()) > 0 && p.contractFailed:
		var names []string
		for _, c := range r.Failed() {
			if c.Name != CheckCleanup && !c.Inconclusive {
				names = append(names, c.Name)
			}
		}
		err = errcode.Errorf(errcode.CodeContract, "store fails the conditional-write contract (failed checks: %s)", strings.Join(names, ", "))
	case abortErr != nil:
		err = abortErr
	case cleanupErr != nil:
		err = cleanupErr
	}
	return r.finish(err)
}

// finish sets the verdict from err and the checks.
func (r *Report) finish(err error) (Report, error) {
	r.Duration = time.Since(r.Started)
	r.Code = errcode.CodeOf(err)
	switch {
	case err == nil && r.Warnings() > 0:
		r.Verdict, r.OK = VerdictWarn, true
	case err == nil:
		r.Verdict, r.OK = VerdictPass, true
	case r.Code == errcode.CodeContract:
		r.Verdict = VerdictFail
	default:
		r.Verdict = VerdictError
	}
	if err != nil {
		r.Error = strings.TrimPrefix(strings.TrimPrefix(err.Error(), string(r.Code)), " ")
	}
	return *r, err
}

type prober struct {
	b      bucket.Bucket
	id     string // distinguishes this probe's bodies from any other writer's
	racers int
	report *Report

	mu      sync.Mutex
	written map[string]bool // every key a write was attempted on

	seq            int
	contractFailed bool
}

// step is the outcome of one check's body: ok, a contract failure, a
// warning, or an abort.
type step struct {
	ok      bool
	warning bool
	detail  string
	abort   error
}

func pass(format string, args ...any) step {
	return step{ok: true, detail: fmt.Sprintf(format, args...)}
}

func warn(format string, args ...any) step {
	return step{ok: true, warning: true, detail: fmt.Sprintf(format, args...)}
}

func fail(format string, args ...any) step {
	return step{detail: fmt.Sprintf(format, args...)}
}

// abort ends the probe: err could not be interpreted as pass or fail.
func abort(what string, err error) step {
	return step{detail: what + ": " + err.Error(), abort: probeError(what, err)}
}

// probeError codes an error that kept the probe from concluding. Storage
// errors keep their own code (access denied is E041, an endpoint that is not
// S3 at all E040); anything else,
// including an ambiguous write, is E011: the store was not usable right now,
// which says nothing about the contract.
func probeError(what string, err error) error {
	var oe *bucket.OpError
	if errors.As(err, &oe) && (oe.ErrorCode() == errcode.CodeUnauthorized || oe.ErrorCode() == errcode.CodeBadRequest) {
		return errcode.Errorf(oe.ErrorCode(), "probe: %s: %w", what, err)
	}
	return errcode.Errorf(errcode.CodeUnavailable, "probe: %s: %w", what, err)
}

func (p *prober) runChecks(ctx context.Context) error {
	var createETag string
	checks := []struct {
		name string
		run  func() step
	}{
		{CheckCreate, func() step { var s step; createETag, s = p.checkCreate(ctx); return s }},
		{CheckETag, func() step { return p.checkETag(ctx, createETag) }},
		{CheckCreateRejected, func() step { return p.checkCreateRejected(ctx) }},
		{CheckUpdate, func() step { return p.checkUpdate(ctx) }},
		{CheckUpdateStale, func() step { return p.checkUpdateStale(ctx) }},
		{CheckIfMatchMissing, func() step { return p.checkIfMatchMissing(ctx) }},
		{CheckDelete, func() step { return p.checkDelete(ctx) }},
		{CheckListAfterWrite, func() step { return p.checkListAfterWrite(ctx) }},
		{CheckRace, func() step { return p.checkRace(ctx) }},
	}
	for _, c := range checks {
		start := time.Now()
		s := c.run()
		p.report.Checks = append(p.report.Checks, Check{
			Name: c.name, OK: s.ok, Warning: s.warning, Inconclusive: s.abort != nil,
			Detail: s.detail, Duration: time.Since(start),
		})
		if s.abort != nil {
			return s.abort
		}
		if !s.ok {
			p.contractFailed = true
		}
	}
	return nil
}

// body returns a fresh, unique body: a probe write never repeats bytes, so
// ETags (content MD5s on most stores) never repeat either.
func (p *prober) body(label string) []byte {
	p.mu.Lock()
	p.seq++
	n := p.seq
	p.mu.Unlock()
	return fmt.Appendf(nil, `{"probe":%q,"step":%q,"seq":%d,"nonce":%q}`, p.id, label, n, nonce.Hex(8))
}

func (p *prober) put(ctx context.Context, key string, body []byte, cond bucket.Condition) (string, error) {
	p.mu.Lock()
	p.written[key] = true
	p.mu.Unlock()
	return p.b.Put(ctx, key, body, cond)
}

// currentETag reads key's ETag; ok is false when the key is missing.
func (p *prober) currentETag(ctx context.Context, key string) (etag string, ok bool, err error) {
	info, err := p.b.Head(ctx, key)
	if errors.Is(err, bucket.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return info.ETag, true, nil
}

// rejectedOutright reports whether a conditional write was refused with a
// definite client error that is not the condition failing (400, 501): the
// store does not implement the header, which breaks the contract.
func rejectedOutright(err error) (*bucket.OpError, bool) {
	var oe *bucket.OpError
	if !errors.As(err, &oe) {
		return nil, false
	}
	if errors.Is(err, bucket.ErrUnsupported) {
		return oe, true
	}
	switch oe.Status {
	case 400, 405:
		return oe, true
	}
	return oe, false
}

func (p *prober) checkCreate(ctx context.Context) (string, step) {
	etag, err := p.put(ctx, "create", p.body("create"), bucket.IfAbsent)
	if err != nil {
		if oe, ok := rejectedOutright(err); ok {
			return "", fail("If-None-Match: * refused outright (%d %s): the store does not support create-only writes", oe.Status, oe.Code)
		}
		if errors.Is(err, bucket.ErrPrecondition) {
			return "", fail("If-None-Match: * on a fresh key was answered 412: the store cannot create conditionally")
		}
		return "", abort("create with If-None-Match", err)
	}
	if etag == "" {
		return "", fail("If-None-Match: * create returned no ETag")
	}
	p.report.Quirks.QuotedETags = strings.HasPrefix(etag, `"`)
	if !p.report.Quirks.QuotedETags {
		p.report.Quirks.observe(bucket.QuirkETagQuoting)
	}
	return etag, pass("If-None-Match: * on a new key created it (ETag %s)", etag)
}

// maxProbeObject bounds the probe's reads: it reads back only the small
// objects it wrote, so anything larger is not one of them.
const maxProbeObject = 1 << 20

func (p *prober) checkETag(ctx context.Context, putETag string) step {
	if putETag == "" {
		return fail("skipped: the create check did not return an ETag")
	}
	obj, err := p.b.Get(ctx, "create", maxProbeObject)
	if err != nil {
		return abort("get", err)
	}
	info, err := p.b.Head(ctx, "create")
	if err != nil {
		return abort("head", err)
	}
	page, err := bucket.ListAll(ctx, p.b, bucket.ListInput{Prefix: "create"})
	if err != nil {
		return abort("list", err)
	}
	listETag := ""
	for _, o := range page.Objects {
		if o.Key == "create" {
			listETag = o.ETag
		}
	}
	var bad []string
	if !bucket.SameETag(obj.ETag, putETag) {
		bad = append(bad, "GET "+obj.ETag)
	}
	if !bucket.SameETag(info.ETag, putETag) {
		bad = append(bad, "HEAD "+info.ETag)
	}
	if len(bad) > 0 {
		return fail("PUT returned %s but %s: If-Match with the PUT's ETag would never match", putETag, strings.Join(bad, ", "))
	}
	if !bucket.SameETag(listETag, putETag) {
		// The protocol compares LIST ETags only with each other (node
		// liveness), so a mismatch is survivable, but it is unusual.
		return warn("PUT, GET and HEAD agree on %s, but LIST reported %q", putETag, listETag)
	}
	return pass("PUT, GET, HEAD and LIST agree on %s", putETag)
}

func (p *prober) checkCreateRejected(ctx context.Context) step {
	before, exists, err := p.currentETag(ctx, "create")
	if err != nil {
		return abort("head", err)
	}
	if !exists {
		// The create check failed; make the key exist for this check.
		if before, err = p.put(ctx, "create", p.body("create-setup"), bucket.None); err != nil {
			return abort("put", err)
		}
	}
	_, err = p.put(ctx, "create", p.body("create-again"), bucket.IfAbsent)
	createErr := err
	switch {
	case err == nil:
		return fail("If-None-Match: * on an existing key succeeded: the store ignores create-only conditions")
	case errors.Is(err, bucket.ErrPrecondition):
	default:
		if oe, ok := rejectedOutright(err); ok {
			return fail("If-None-Match: * refused outright (%d %s)", oe.Status, oe.Code)
		}
		return abort("rejected create", err)
	}
	if oe := (*bucket.OpError)(nil); errors.As(createErr, &oe) && oe.Status == 409 && oe.Code == "BlobAlreadyExists" {
		p.report.Quirks.observe(bucket.QuirkAzureCreateExists)
	}
	after, _, err := p.currentETag(ctx, "create")
	if err != nil {
		return abort("head", err)
	}
	if !bucket.SameETag(before, after) {
		return fail("If-None-Match: * was answered %s but the object changed (%s -> %s)", refusal(createErr), before, after)
	}
	return pass("If-None-Match: * on an existing key was refused (%s) and changed nothing", refusal(createErr))
}

// refusal names a failed precondition as the store answered it: 412, or
// the status and code of a store that says it another way (Azure's 409
// BlobAlreadyExists, quirks table: azure-create-exists-409).
func refusal(err error) string {
	var oe *bucket.OpError
	if errors.As(err, &oe) && oe.Status != 0 && oe.Status != 412 {
		return fmt.Sprintf("%d %s", oe.Status, oe.Code)
	}
	return "412"
}

// putPlain writes key unconditionally to set a check up. A store that
// returns no ETag fails the check: If-Match needs one.
func (p *prober) putPlain(ctx context.Context, key, label string) (string, *step) {
	etag, err := p.put(ctx, key, p.body(label), bucket.None)
	if err != nil {
		s := abort("put", err)
		return "", &s
	}
	if etag == "" {
		s := fail("PUT returned no ETag: If-Match cannot be used")
		return "", &s
	}
	return etag, nil
}

func (p *prober) checkUpdate(ctx context.Context) step {
	e0, s := p.putPlain(ctx, "update", "update-setup")
	if s != nil {
		return *s
	}
	e1, err := p.put(ctx, "update", p.body("update"), bucket.IfMatch(e0))
	switch {
	case err == nil:
	case errors.Is(err, bucket.ErrPrecondition):
		return fail("If-Match with the current ETag %s was refused (412)", e0)
	default:
		if oe, ok := rejectedOutright(err); ok {
			return fail("If-Match refused outright (%d %s): the store does not support conditional updates", oe.Status, oe.Code)
		}
		return abort("update with If-Match", err)
	}
	if bucket.SameETag(e0, e1) {
		return fail("an update with a different body kept the ETag %s: If-Match cannot tell versions apart", e0)
	}
	cur, _, err := p.currentETag(ctx, "update")
	if err != nil {
		return abort("head", err)
	}
	if !bucket.SameETag(cur, e1) {
		return fail("If-Match update returned %s but HEAD shows %s", e1, cur)
	}
	return pass("If-Match with the current ETag replaced the object (%s -> %s)", e0, e1)
}

func (p *prober) checkUpdateStale(ctx context.Context) step {
	stale, s := p.putPlain(ctx, "stale", "stale-1")
	if s != nil {
		return *s
	}
	fresh, s := p.putPlain(ctx, "stale", "stale-2")
	if s != nil {
		return *s
	}
	_, err := p.put(ctx, "stale", p.body("stale-write"), bucket.IfMatch(stale))
	switch {
	case err == nil:
		return fail("If-Match with a stale ETag succeeded: the store ignores If-Match")
	case errors.Is(err, bucket.ErrPrecondition):
	default:
		if oe, ok := rejectedOutright(err); ok {
			return fail("If-Match refused outright (%d %s)", oe.Status, oe.Code)
		}
		return abort("stale update", err)
	}
	cur, _, err := p.currentETag(ctx, "stale")
	if err != nil {
		return abort("head", err)
	}
	if !bucket.SameETag(cur, fresh) {
		return fail("If-Match with a stale ETag was answered 412 but the object changed (%s -> %s)", fresh, cur)
	}
	return pass("If-Match with a stale ETag was refused (412) and changed nothing")
}

func (p *prober) checkIfMatchMissing(ctx context.Context) step {
	// An ETag in the store's own format that cannot match: the MD5 of a
	// body never written is as good as any.
	ghost := `"` + nonce.Hex(16) + `"`
	_, err := p.put(ctx, "missing", p.body("missing"), bucket.IfMatch(ghost))
	var status int
	var oe *bucket.OpError
	if errors.As(err, &oe) {
		status = oe.Status
	}
	switch {
	case err == nil:
		return fail("If-Match on a missing key created it: the store ignores If-Match")
	case errors.Is(err, bucket.ErrPrecondition):
	default:
		if oe, ok := rejectedOutright(err); ok {
			return fail("If-Match on a missing key refused with %d %s instead of 404 or 412", oe.Status, oe.Code)
		}
		return abort("If-Match on a missing key", err)
	}
	p.report.Quirks.IfMatchMissingStatus = status
	if status == 404 {
		p.report.Quirks.observe(bucket.QuirkIfMatchMissing404)
	}
	_, exists, err := p.currentETag(ctx, "missing")
	if err != nil {
		return abort("head", err)
	}
	if exists {
		return fail("If-Match on a missing key was answered %d but the key now exists", status)
	}
	switch status {
	case 404:
		return pass("If-Match on a missing key was refused with 404 (as AWS S3 does); deed reads it as 412")
	case 412:
		return pass("If-Match on a missing key was refused with 412")
	default:
		return pass("If-Match on a missing key was refused (precondition failed)")
	}
}

func (p *prober) checkDelete(ctx context.Context) step {
	stale, s := p.putPlain(ctx, "delete", "delete-1")
	if s != nil {
		return *s
	}
	fresh, s := p.putPlain(ctx, "delete", "delete-2")
	if s != nil {
		return *s
	}
	err := p.b.Delete(ctx, "delete", bucket.IfMatch(stale))
	switch {
	case err == nil:
		return warn("DELETE with a stale If-Match deleted the object: the store ignores conditions on DELETE; deed will not rely on them")
	case errors.Is(err, bucket.ErrPrecondition):
	case errors.Is(err, bucket.ErrNotFound):
		return warn("DELETE with a stale If-Match on an existing key was answered 404; deed will not rely on conditional deletes")
	default:
		if oe, ok := p.unsupportedDelete(err); ok {
			return warn("DELETE with If-Match is not supported (%d %s); deed will not rely on it", oe.Status, oe.Code)
		}
		return abort("conditional delete (stale)", err)
	}
	cur, exists, err := p.currentETag(ctx, "delete")
	if err != nil {
		return abort("head", err)
	}
	if !exists || !bucket.SameETag(cur, fresh) {
		return warn("DELETE with a stale If-Match answered 412 but the object changed; deed will not rely on conditional deletes")
	}
	err = p.b.Delete(ctx, "delete", bucket.IfMatch(fresh))
	switch {
	case err == nil:
	case errors.Is(err, bucket.ErrPrecondition):
		return warn("DELETE with the current If-Match was refused (412); deed will not rely on conditional deletes")
	default:
		if oe, ok := p.unsupportedDelete(err); ok {
			return warn("DELETE with a current If-Match is not supported (%d %s); deed will not rely on it", oe.Status, oe.Code)
		}
		return abort("conditional delete (current)", err)
	}
	if _, exists, err = p.currentETag(ctx, "delete"); err != nil {
		return abort("head", err)
	}
	if exists {
		return warn("DELETE with the current If-Match succeeded but the object is still there")
	}
	p.report.Quirks.ConditionalDelete = true
	return pass("DELETE with If-Match: stale ETag refused (412), current ETag accepted")
}

// checkListAfterWrite looks for listings that lag behind writes. Safety
// never rests on LIST, with one exception: a walk that meets a hole at the
// very start of a chain learns that GC made it (rather than that the chain
// ends there) only from a fresh LIST showing the snapshot. On a store whose
// listings lag, deed works, but GC must not run while cells are opened or
// read, so this is a warning, not a failure. One pass proves nothing about
// consistency in general; a lag it does see is proof of the opposite.
func (p *prober) checkListAfterWrite(ctx context.Context) step {
	const key = "listed"
	etag, err := p.put(ctx, key, p.body("listed"), bucket.IfAbsent)
	if err != nil {
		return abort("create", err)
	}
	shown := func() (bool, error) {
		page, err := bucket.ListAll(ctx, p.b, bucket.ListInput{Prefix: key})
		if err != nil {
			return false, err
		}
		for _, o := range page.Objects {
			if o.Key == key && bucket.SameETag(o.ETag, etag) {
				return true, nil
			}
		}
		return false, nil
	}
	ok, err := shown()
	if err != nil {
		return abort("list", err)
	}
	if !ok {
		return warn("LIST right after a PUT did not show the new object: listings lag behind writes; run deed gc only while no cell is being opened or read")
	}
	if err := p.b.Delete(ctx, key, bucket.Condition{}); err != nil {
		return abort("delete", err)
	}
	if ok, err = shown(); err != nil {
		return abort("list", err)
	}
	if ok {
		return warn("LIST right after a DELETE still showed the object: listings lag behind writes; run deed gc only while no cell is being opened or read")
	}
	p.report.Quirks.ListAfterWrite = true
	return pass("LIST showed a new object at once and stopped showing it once deleted")
}

// unsupportedDelete: a conditional DELETE refused with a definite client
// error (501 NotImplemented, 400): the store does not implement it. Since a
// delete is not part of the safety contract, this is only a warning.
func (p *prober) unsupportedDelete(err error) (*bucket.OpError, bool) {
	oe, ok := rejectedOutright(err)
	if ok && errors.Is(err, bucket.ErrUnsupported) {
		p.report.Quirks.observe(bucket.QuirkNotImplemented)
	}
	if !ok && oe != nil && oe.Status >= 400 && oe.Status < 500 && oe.Status != 404 && oe.Status != 409 &&
		!errors.Is(err, bucket.ErrAccessDenied) {
		return oe, true
	}
	return oe, ok
}

// raceAttempts bounds how often the race is re-run when no racer won and
// every loser saw 409: legal (the store may refuse concurrent conditional
// writes) but not a conclusion.
const raceAttempts = 3

func (p *prober) checkRace(ctx context.Context) step {
	for attempt := 1; ; attempt++ {
		s, again := p.race(ctx, fmt.Sprintf("race-%d", attempt))
		if !again || attempt == raceAttempts {
			return s
		}
	}
}

// race sends p.racers concurrent creates of key. again asks for a re-run.
func (p *prober) race(ctx context.Context, key string) (s step, again bool) {
	type result struct {
		body []byte
		etag string
		err  error
	}
	results := make([]result, p.racers)
	for i := range results {
		results[i].body = p.body(fmt.Sprintf("racer-%d", i))
	}
	// Mark the key before any racer starts: an ambiguous racer may have
	// written it, and cleanup must not miss it.
	p.mu.Lock()
	p.written[key] = true
	p.mu.Unlock()

	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			<-start
			results[i].etag, results[i].err = p.b.Put(ctx, key, results[i].body, bucket.IfAbsent)
		})
	}
	close(start)
	wg.Wait()

	var winners []int
	var refused, conflicts int
	var unclear []error
	for i, r := range results {
		switch {
		case r.err == nil:
			winners = append(winners, i)
		case errors.Is(r.err, bucket.ErrPrecondition):
			refused++
		case errors.Is(r.err, bucket.ErrConflict):
			conflicts++
		default:
			unclear = append(unclear, r.err)
		}
	}
	if conflicts > 0 {
		p.report.Quirks.observe(bucket.QuirkConditionalConflict)
	}
	tally := fmt.Sprintf("%d racers: %d won, %d refused (412), %d conflict (409)", p.racers, len(winners), refused, conflicts)
	if len(winners) > 1 {
		return fail("%s: more than one create-only write succeeded", tally), false
	}
	if len(unclear) > 0 {
		// An unclear racer may have landed and been overwritten by the
		// "winner", or the reverse: no conclusion is possible.
		return abort(fmt.Sprintf("race inconclusive (%s, %d unclear)", tally, len(unclear)), unclear[0]), false
	}
	obj, err := p.b.Get(ctx, key, maxProbeObject)
	switch {
	case errors.Is(err, bucket.ErrNotFound) && len(winners) == 0:
		if conflicts == p.racers {
			return abort("race inconclusive", fmt.Errorf("%s in %d attempts: every racer got 409", tally, raceAttempts)), true
		}
		return fail("%s: nobody won and the key is missing", tally), false
	case errors.Is(err, bucket.ErrNotFound):
		return fail("%s but the key is missing afterwards", tally), false
	case err != nil:
		return abort("get race key", err), false
	}
	if len(winners) == 0 {
		return fail("%s, yet the key holds a body: a refused write landed", tally), false
	}
	w := results[winners[0]]
	if string(obj.Body) != string(w.body) || !bucket.SameETag(obj.ETag, w.etag) {
		return fail("%s, but the key holds another racer's body: a refused write landed", tally), false
	}
	return pass("%s; the winner's body is stored", tally), false
}

// cleanupTimeout bounds cleanup, which runs even when ctx is done.
const cleanupTimeout = 30 * time.Second

// cleanup deletes every key the probe tried to write (unconditionally:
// whatever is there is the probe's), then lists the scratch prefix to verify
// it is empty again, and records the outcome as the last check. A key it
// finds but did not write is reported and left alone.
func (p *prober) cleanup(ctx context.Context) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()

	p.mu.Lock()
	keys := make([]string, 0, len(p.written))
	for k := range p.written {
		keys = append(keys, k)
	}
	p.mu.Unlock()
	sort.Strings(keys)

	var firstErr error
	del := func(key string) {
		if err := deleteRetry(ctx, p.b, key); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	for _, k := range keys {
		del(k)
	}
	var ours, foreign []string
	var err error
	// A store whose listings lag (see checkListAfterWrite) may still list
	// keys just deleted: look again a few times before calling them left.
	for attempt := 0; attempt < 4; attempt++ {
		var left []string
		if left, err = listRetry(ctx, p.b); err != nil {
			break
		}
		ours, foreign = ours[:0], foreign[:0]
		for _, k := range left {
			if p.written[k] {
				ours = append(ours, k)
			} else {
				foreign = append(foreign, k)
			}
		}
		if len(ours) == 0 || attempt == 3 || wait.Sleep(ctx, time.Duration(100<<attempt)*time.Millisecond) != nil {
			break
		}
	}
	check := Check{Name: CheckCleanup, Duration: time.Since(start)}
	var out error
	switch {
	case err != nil:
		check.Detail = fmt.Sprintf("could not list the scratch prefix to verify it is empty: %v", err)
		out = probeError("clean up "+p.report.Prefix, err)
	case len(ours) > 0:
		check.Detail = fmt.Sprintf("%d key(s) left under %s/: %s", len(ours), p.report.Prefix, strings.Join(ours, ", "))
		if firstErr != nil {
			check.Detail += fmt.Sprintf(" (%v)", firstErr)
		}
		out = errcode.Errorf(errcode.CodeUnavailable, "probe: clean up %s: %d key(s) left", p.report.Prefix, len(ours))
	case len(foreign) > 0:
		// Someone else wrote into the scratch prefix while the probe ran;
		// their writes may have disturbed the checks.
		check.Detail = fmt.Sprintf("%d key(s) appeared under %s/ that the probe did not write (left alone): %s",
			len(foreign), p.report.Prefix, strings.Join(foreign, ", "))
		out = errcode.Errorf(errcode.CodeUnavailable, "probe: another writer used the scratch prefix %s during the probe", p.report.Prefix)
	default:
		check.OK = true
		check.Detail = fmt.Sprintf("deleted %d key(s); the scratch prefix lists empty", len(keys))
	}
	p.report.Checks = append(p.report.Checks, check)
	return out
}

// deleteRetry deletes key unconditionally, retrying transient errors briefly
// (an unconditional delete is idempotent, so retrying is safe).
func deleteRetry(ctx context.Context, b bucket.Bucket, key string) error {
	err := wait.Retry(ctx, 4, probeBackoff, nil, func(ctx context.Context) error {
		if err := b.Delete(ctx, key, bucket.None); err != nil && !errors.Is(err, bucket.ErrNotFound) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// listRetry lists every key under b, retrying transient errors briefly.
func listRetry(ctx context.Context, b bucket.Bucket) ([]string, error) {
	var page bucket.ListPage
	err := wait.Retry(ctx, 4, probeBackoff, nil, func(ctx context.Context) (err error) {
		page, err = bucket.ListAll(ctx, b, bucket.ListInput{})
		return err
	})
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(page.Objects))
	for _, o := range page.Objects {
		keys = append(keys, o.Key)
	}
	return keys, nil
}

// probeBackoff paces the clean-up's retries: brief, since the probe is
// interactive.
var probeBackoff = wait.Backoff{Min: 50 * time.Millisecond}
