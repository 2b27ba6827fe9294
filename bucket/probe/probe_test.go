package probe_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/probe"
	"github.com/deedkit/deed/bucket/storetest"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/s3test"
)

// probeMem runs Probe against m (optionally scoped) and checks that nothing
// is left behind anywhere in m afterwards.
func probeMem(t *testing.T, ctx context.Context, m *fakes3.Mem, b bucket.Bucket, opts probe.Options) (probe.Report, error) {
	t.Helper()
	before := m.Keys("")
	rep, err := probe.Run(ctx, b, opts)
	if after := m.Keys(""); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("probe left keys behind: before %q, after %q", before, after)
	}
	if c, ok := rep.Check(probe.CheckCleanup); len(rep.Checks) > 0 && (!ok || !c.OK) {
		t.Errorf("cleanup check = %+v, want OK", c)
	}
	return rep, err
}

func TestProbeMemPasses(t *testing.T) {
	m := fakes3.NewMem()
	rep, err := probeMem(t, t.Context(), m, m, probe.Options{})
	if err != nil {
		t.Fatalf("Probe: %v\n%s", err, dump(rep))
	}
	if !rep.OK || rep.Verdict != probe.VerdictPass || rep.Code != "" || rep.Warnings() != 0 {
		t.Fatalf("report = ok %v verdict %q code %q warnings %d, want a clean pass\n%s", rep.OK, rep.Verdict, rep.Code, rep.Warnings(), dump(rep))
	}
	want := []string{
		probe.CheckCreate, probe.CheckETag, probe.CheckCreateRejected, probe.CheckUpdate,
		probe.CheckUpdateStale, probe.CheckIfMatchMissing, probe.CheckDelete, probe.CheckListAfterWrite, probe.CheckRace, probe.CheckCleanup,
	}
	var got []string
	for _, c := range rep.Checks {
		got = append(got, c.Name)
		if !c.OK || c.Warning || c.Detail == "" {
			t.Errorf("check %+v, want OK with a detail", c)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("checks = %v, want %v", got, want)
	}
	if !strings.HasPrefix(rep.Prefix, "deed-probe/") || rep.Racers != probe.DefaultRacers {
		t.Errorf("prefix %q racers %d, want deed-probe/<random> and %d", rep.Prefix, rep.Racers, probe.DefaultRacers)
	}
	q := rep.Quirks
	if q.IfMatchMissingStatus != 404 || !q.ConditionalDelete || !q.QuotedETags ||
		strings.Join(q.Observed, ",") != bucket.QuirkIfMatchMissing404 {
		t.Errorf("quirks = %+v, want 404 / conditional delete / quoted / observed [%s]", q, bucket.QuirkIfMatchMissing404)
	}
	if c, _ := rep.Check(probe.CheckRace); !strings.Contains(c.Detail, "32 racers: 1 won, 31 refused") {
		t.Errorf("race detail = %q", c.Detail)
	}
}

func TestProbeIgnoredConditionsFailE010(t *testing.T) {
	m := fakes3.NewMem()
	m.SetIgnoreConditions(true)
	rep, err := probeMem(t, t.Context(), m, m, probe.Options{Racers: 8})
	if errcode.CodeOf(err) != errcode.CodeContract {
		t.Fatalf("Probe err = %v (code %q), want DEED-E010", err, errcode.CodeOf(err))
	}
	var ce *errcode.Error
	if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "DEED-E010 ") {
		t.Errorf("err = %T %q, want a *errcode.Error starting with DEED-E010", err, err)
	}
	if rep.OK || rep.Verdict != probe.VerdictFail || rep.Code != errcode.CodeContract {
		t.Errorf("report ok %v verdict %q code %q, want fail E010", rep.OK, rep.Verdict, rep.Code)
	}
	for _, name := range []string{probe.CheckCreateRejected, probe.CheckUpdateStale, probe.CheckIfMatchMissing, probe.CheckRace} {
		if c, ok := rep.Check(name); !ok || c.OK || c.Inconclusive {
			t.Errorf("check %s = %+v, want a failure", name, c)
		}
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name failed check %s", err, name)
		}
	}
	if c, _ := rep.Check(probe.CheckDelete); !c.OK || !c.Warning {
		t.Errorf("conditional-delete = %+v, want a warning (stale delete went through)", c)
	}
	if c, _ := rep.Check(probe.CheckRace); !strings.Contains(c.Detail, "8 won") {
		t.Errorf("race detail = %q, want 8 winners", c.Detail)
	}
	if c, _ := rep.Check(probe.CheckRace); rep.Verdict != probe.VerdictFail || rep.Code != errcode.CodeContract || c.OK {
		t.Errorf("verdict %q code %q race %+v, want a DEED-E010 failure of the race check", rep.Verdict, rep.Code, c)
	}
}

// TestProbeS3Targets runs the probe through aws-sdk-go-v2 against the HTTP
// fake and, under make test-s3, versitygw: both must pass, and a server
// ignoring conditions must fail with DEED-E010.
func TestProbeS3Targets(t *testing.T) {
	// Under make test-stores: fake-gcs-server and Azurite too.
	for _, tg := range storetest.All(t) {
		t.Run(tg.Name, func(t *testing.T) {
			for i := range 2 { // twice: the race must not pass by luck, nor the first run leave anything
				rep, err := probe.Run(t.Context(), tg.Bucket, probe.Options{})
				if err != nil || !rep.OK {
					t.Fatalf("run %d: Probe: %v\n%s", i, err, dump(rep))
				}
				if c, _ := rep.Check(probe.CheckRace); !strings.Contains(c.Detail, "1 won") {
					t.Errorf("race: %s", c.Detail)
				}
				if c, _ := rep.Check(probe.CheckCreateRejected); tg.Name == "azurite" && !strings.Contains(c.Detail, "409 BlobAlreadyExists") {
					t.Errorf("create-rejected on Azure does not say how it was refused: %s", c.Detail)
				}
				t.Logf("%s run %d: verdict %s, quirks %+v", tg.Name, i, rep.Verdict, rep.Quirks)
			}
			page, err := bucket.ListAll(t.Context(), tg.Bucket, bucket.ListInput{})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Objects) != 0 {
				t.Errorf("probe left %d objects behind", len(page.Objects))
			}
		})
	}
	t.Run("httpfake-ignoring-conditions", func(t *testing.T) {
		tg := s3test.HTTPFakeWith(t, fakes3.ServerOptions{IgnoreConditions: true})
		rep, err := probe.Run(t.Context(), tg.Bucket, probe.Options{Racers: 8})
		if errcode.CodeOf(err) != errcode.CodeContract {
			t.Fatalf("Probe err = %v, want DEED-E010\n%s", err, dump(rep))
		}
	})
}

func TestProbeTransientErrors(t *testing.T) {
	tests := []struct {
		name string
		rule fakes3.Rule
	}{
		{"slowdown everything", fakes3.Rule{Fault: fakes3.SlowDown}}, // fails at the first LIST: no checks
		{"slowdown after the first list", fakes3.Rule{Fault: fakes3.SlowDown, Skip: 1}},
		{"slowdown on later puts", fakes3.Rule{Op: fakes3.OpPut, Fault: fakes3.SlowDown, Skip: 4}},
		{"error before apply on heads", fakes3.Rule{Op: fakes3.OpHead, Fault: fakes3.ErrBefore, Skip: 1}},
		{"lost response in the race", fakes3.Rule{Op: fakes3.OpPut, Fault: fakes3.ErrAfter, Times: 1,
			Match: func(_ fakes3.Op, key string) bool { return strings.HasSuffix(key, "/race-1") }}},
		{"lost response on create", fakes3.Rule{Op: fakes3.OpPut, Fault: fakes3.ErrAfter, Times: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := fakes3.NewMem()
			m.Inject(tt.rule)
			rep, err := probe.Run(t.Context(), m, probe.Options{Racers: 8})
			if errcode.CodeOf(err) != errcode.CodeUnavailable {
				t.Fatalf("Probe err = %v, want DEED-E011\n%s", err, dump(rep))
			}
			if rep.OK || rep.Verdict != probe.VerdictError {
				t.Errorf("verdict %q ok %v, want error", rep.Verdict, rep.OK)
			}
			var inconclusive int
			for _, c := range rep.Checks {
				if !c.OK && !c.Inconclusive && c.Name != probe.CheckCleanup {
					t.Errorf("check %+v failed: a transient error must not count against the store", c)
				}
				if c.Inconclusive {
					inconclusive++
				}
			}
			if want := min(1, len(rep.Checks)); inconclusive != want {
				t.Errorf("%d inconclusive checks, want 1\n%s", inconclusive, dump(rep))
			}
			m.ClearFaults()
			if keys := m.Keys(""); len(keys) > 0 {
				t.Errorf("probe left %q behind", keys)
			}
		})
	}
}

func TestProbeCancelled(t *testing.T) {
	m := fakes3.NewMem()
	ctx, cancel := context.WithCancel(t.Context())
	// Cancel in the middle: the first HEAD (after two PUTs) cancels.
	m.Inject(fakes3.Rule{Op: fakes3.OpGet, Times: 1, Match: func(fakes3.Op, string) bool { cancel(); return true }})
	_, err := probe.Run(ctx, m, probe.Options{})
	if errcode.CodeOf(err) != errcode.CodeUnavailable || !errors.Is(err, context.Canceled) {
		t.Fatalf("Probe err = %v, want DEED-E011 wrapping context.Canceled", err)
	}
	if keys := m.Keys(""); len(keys) > 0 {
		t.Errorf("cleanup must run despite the cancelled context; left %q", keys)
	}
}

func TestProbeScopedPrefix(t *testing.T) {
	m := fakes3.NewMem()
	m.Set("tenant/keep.json", []byte("{}"))
	m.Set("tenant/scratchy", []byte("{}")) // shares the scratch prefix's bytes, not its folder
	var seen []string
	m.Inject(fakes3.Rule{Op: fakes3.OpPut, Match: func(_ fakes3.Op, key string) bool {
		seen = append(seen, key) // puts of the race run concurrently, but Match runs under m's lock
		return false
	}})
	rep, err := probeMem(t, t.Context(), m, bucket.WithPrefix(m, "tenant"), probe.Options{Prefix: "/scratch/", Racers: 4})
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if rep.Prefix != "scratch" {
		t.Errorf("prefix = %q, want scratch", rep.Prefix)
	}
	for _, k := range seen {
		if !strings.HasPrefix(k, "tenant/scratch/") {
			t.Errorf("probe wrote %q outside tenant/scratch/", k)
		}
	}
}

// hooked wraps a Bucket to let a test rewrite one operation's outcome.
type hooked struct {
	bucket.Bucket
	put func(ctx context.Context, key string, body []byte, c bucket.Condition) (string, error)
	del func(ctx context.Context, key string, c bucket.Condition) error
}

func (h hooked) Put(ctx context.Context, key string, body []byte, c bucket.Condition) (string, error) {
	if h.put != nil {
		return h.put(ctx, key, body, c)
	}
	return h.Bucket.Put(ctx, key, body, c)
}

func (h hooked) Delete(ctx context.Context, key string, c bucket.Condition) error {
	if h.del != nil {
		return h.del(ctx, key, c)
	}
	return h.Bucket.Delete(ctx, key, c)
}

func TestProbeConditionalDeleteUnsupportedIsAWarning(t *testing.T) {
	for _, status := range []int{501, 400} {
		m := fakes3.NewMem()
		b := hooked{Bucket: m, del: func(ctx context.Context, key string, c bucket.Condition) error {
			if c.Conditional() {
				return bucket.Classify("delete", key, c, status, "NotImplemented", nil)
			}
			return m.Delete(ctx, key, c)
		}}
		rep, err := probeMem(t, t.Context(), m, b, probe.Options{Racers: 4})
		if err != nil {
			t.Fatalf("status %d: Probe: %v", status, err)
		}
		c, _ := rep.Check(probe.CheckDelete)
		if !rep.OK || rep.Verdict != probe.VerdictWarn || !c.OK || !c.Warning || rep.Quirks.ConditionalDelete {
			t.Errorf("status %d: verdict %q, check %+v, quirks %+v: want a warning", status, rep.Verdict, c, rep.Quirks)
		}
		if has := strings.Contains(strings.Join(rep.Quirks.Observed, ","), bucket.QuirkNotImplemented); has != (status == 501) {
			t.Errorf("status %d: observed quirks %v", status, rep.Quirks.Observed)
		}
		if n := rep.Warnings(); n != 1 {
			t.Errorf("status %d: %d warnings, want 1\n%s", status, n, dump(rep))
		}
	}
}

func TestProbeReports412ForIfMatchMissing(t *testing.T) {
	m := fakes3.NewMem()
	b := hooked{Bucket: m, put: func(ctx context.Context, key string, body []byte, c bucket.Condition) (string, error) {
		etag, err := m.Put(ctx, key, body, c)
		var oe *bucket.OpError
		if errors.As(err, &oe) && oe.Status == 404 {
			return "", bucket.Classify("put", key, c, 412, "PreconditionFailed", nil)
		}
		return etag, err
	}}
	rep, err := probeMem(t, t.Context(), m, b, probe.Options{Racers: 4})
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if rep.Quirks.IfMatchMissingStatus != 412 {
		t.Errorf("if-match-missing status = %d, want 412", rep.Quirks.IfMatchMissingStatus)
	}
}

func TestProbeConditionalPutRefusedOutright(t *testing.T) {
	m := fakes3.NewMem()
	b := hooked{Bucket: m, put: func(ctx context.Context, key string, body []byte, c bucket.Condition) (string, error) {
		if c.Conditional() {
			return "", bucket.Classify("put", key, c, 501, "NotImplemented", nil)
		}
		return m.Put(ctx, key, body, c)
	}}
	rep, err := probeMem(t, t.Context(), m, b, probe.Options{Racers: 4})
	if errcode.CodeOf(err) != errcode.CodeContract {
		t.Fatalf("Probe err = %v, want DEED-E010\n%s", err, dump(rep))
	}
}

func TestProbeAccessDenied(t *testing.T) {
	m := fakes3.NewMem()
	b := hooked{Bucket: m, put: func(ctx context.Context, key string, body []byte, c bucket.Condition) (string, error) {
		return "", bucket.Classify("put", key, c, 403, "AccessDenied", nil)
	}}
	_, err := probeMem(t, t.Context(), m, b, probe.Options{})
	if errcode.CodeOf(err) != errcode.CodeUnauthorized {
		t.Fatalf("Probe err = %v, want DEED-E041", err)
	}
}

func TestProbeBadOptions(t *testing.T) {
	m := fakes3.NewMem()
	for _, opts := range []probe.Options{{Racers: 1}, {Racers: -3}, {Prefix: "a/../b"}, {Prefix: "a//b"}} {
		_, err := probe.Run(t.Context(), m, opts)
		if errcode.CodeOf(err) != errcode.CodeBadRequest {
			t.Errorf("Probe(%+v) err = %v, want DEED-E040", opts, err)
		}
	}
	if c := m.Counts(); c.Total() != 0 {
		t.Errorf("bad options sent %d requests, want none", c.Total())
	}
}

// TestProbeRefusesNonEmptyPrefix: the probe never works among (and so never
// deletes) keys it did not write.
func TestProbeRefusesNonEmptyPrefix(t *testing.T) {
	m := fakes3.NewMem()
	m.Set("data/own.json", []byte("precious"))
	rep, err := probe.Run(t.Context(), m, probe.Options{Prefix: "data"})
	if errcode.CodeOf(err) != errcode.CodeBadRequest || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Probe err = %v, want DEED-E040 not empty", err)
	}
	if len(rep.Checks) != 0 || rep.Verdict != probe.VerdictError {
		t.Errorf("report = %+v, want no checks", rep)
	}
	if got := m.Keys(""); len(got) != 1 {
		t.Errorf("keys = %q, want data/own.json untouched", got)
	}
	if c := m.Counts(); c.Put+c.Delete != 0 {
		t.Errorf("counts %+v: want no writes", c)
	}
}

// TestProbeForeignKeyIsReportedNotDeleted: a key another writer drops into
// the scratch prefix mid-probe is reported and left alone.
func TestProbeForeignKeyIsReportedNotDeleted(t *testing.T) {
	m := fakes3.NewMem()
	var once sync.Once
	b := hooked{Bucket: m, put: func(ctx context.Context, key string, body []byte, c bucket.Condition) (string, error) {
		once.Do(func() { m.Set("scratch/intruder", []byte("x")) })
		return m.Put(ctx, key, body, c)
	}}
	rep, err := probe.Run(t.Context(), b, probe.Options{Prefix: "scratch", Racers: 4})
	if errcode.CodeOf(err) != errcode.CodeUnavailable {
		t.Fatalf("Probe err = %v, want DEED-E011\n%s", err, dump(rep))
	}
	if c, _ := rep.Check(probe.CheckCleanup); c.OK || !strings.Contains(c.Detail, "intruder") {
		t.Errorf("cleanup = %+v", c)
	}
	if got := m.Keys(""); strings.Join(got, ",") != "scratch/intruder" {
		t.Errorf("keys = %q, want only the intruder", got)
	}
}

func TestProbeReportJSON(t *testing.T) {
	m := fakes3.NewMem()
	m.SetIgnoreConditions(true)
	rep, _ := probe.Run(t.Context(), m, probe.Options{Racers: 4})
	rep.Bucket = "s3://b/p"
	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"bucket", "prefix", "verdict", "ok", "code", "error", "racers", "quirks", "checks", "started", "duration_ms"} {
		if _, ok := generic[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, raw)
		}
	}
	if generic["code"] != "DEED-E010" || generic["verdict"] != "fail" {
		t.Errorf("code %v verdict %v", generic["code"], generic["verdict"])
	}
	first := generic["checks"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "ok", "detail", "duration_ms"} {
		if _, ok := first[k]; !ok {
			t.Errorf("check JSON lacks %q: %v", k, first)
		}
	}
	var back probe.Report
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if back.Verdict != rep.Verdict || len(back.Checks) != len(rep.Checks) || back.Checks[0].Name != rep.Checks[0].Name ||
		back.Duration <= 0 || back.Code != rep.Code {
		t.Errorf("round trip: got %+v, want %+v", back, rep)
	}
}

// dump shows a report in a failure message.
func dump(r probe.Report) string {
	b, _ := json.MarshalIndent(r, "", "  ")
	return string(b)
}

// lagging is a store whose listings show a write only from the second LIST
// after it (and a delete likewise), as an eventually consistent index does.
type lagging struct {
	bucket.Bucket
	mu     sync.Mutex
	listed map[string]string // key → the ETag the previous LIST saw ("" = absent)
}

func (l *lagging) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	page, err := l.Bucket.List(ctx, in)
	if err != nil {
		return page, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := map[string]string{}
	var shown []bucket.Info
	for _, o := range page.Objects {
		now[o.Key] = o.ETag
		if _, seen := l.listed[o.Key]; seen {
			shown = append(shown, o)
		}
	}
	for k := range l.listed {
		if _, ok := now[k]; !ok {
			shown = append(shown, bucket.Info{Key: k, ETag: l.listed[k]}) // deleted, still listed once
		}
	}
	l.listed = now
	page.Objects = shown
	return page, nil
}

// A store whose listings lag behind writes passes with a warning: deed
// works on it, but GC must not run while cells are opened or read.
func TestProbeListThatLagsIsAWarning(t *testing.T) {
	m := fakes3.NewMem()
	b := &lagging{Bucket: m, listed: map[string]string{}}
	rep, err := probe.Run(t.Context(), b, probe.Options{Racers: 4})
	if err != nil {
		t.Fatalf("Probe: %v\n%s", err, dump(rep))
	}
	c, _ := rep.Check(probe.CheckListAfterWrite)
	if !rep.OK || rep.Verdict != probe.VerdictWarn || !c.OK || !c.Warning || rep.Quirks.ListAfterWrite {
		t.Fatalf("verdict %q, check %+v, quirks %+v: want a warning\n%s", rep.Verdict, c, rep.Quirks, dump(rep))
	}
	if !strings.Contains(c.Detail, "did not show the new object") {
		t.Errorf("detail %q", c.Detail)
	}
}
