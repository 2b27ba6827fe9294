package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/probe"
	"github.com/deedkit/deed/fakes3"
)

// The text of `deed probe` is what operators and their scripts read: these
// reports render byte for byte as they did when the probe package rendered
// them itself (the expected strings were produced by that code).
var probeTextReports = []probe.Report{
	{
		Bucket: "s3://b/p at http://127.0.0.1:9000", Prefix: "deed-probe/0123abcd", Racers: 8,
		Verdict: probe.VerdictPass, OK: true, Duration: 1234567 * time.Microsecond,
		Quirks: probe.Quirks{IfMatchMissingStatus: 404, ConditionalDelete: true, ListAfterWrite: true, QuotedETags: true},
		Checks: []probe.Check{
			{Name: "create", OK: true, Detail: "created", Duration: 1500 * time.Microsecond},
			{Name: "race", OK: true, Detail: "1 of 8 won", Duration: 12 * time.Millisecond},
			{Name: "cleanup", OK: true, Detail: "deleted 3 key(s)", Duration: 800 * time.Nanosecond},
		},
	},
	{
		Prefix: "scratch", Racers: 4, Verdict: probe.VerdictWarn, OK: true, Duration: 45 * time.Millisecond,
		Quirks: probe.Quirks{Observed: []string{"not-implemented", "etag-quoting"}},
		Checks: []probe.Check{
			{Name: "conditional-delete", OK: true, Warning: true, Detail: "unsupported", Duration: 2 * time.Second},
		},
	},
	{
		Prefix: "p", Racers: 2, Verdict: probe.VerdictFail, Code: "DEED-E010",
		Checks: []probe.Check{
			{Name: "create-rejected", Detail: "ignored", Duration: time.Millisecond},
			{Name: "etag", OK: true, Detail: "ok"},
		},
	},
	{
		Prefix: "p", Racers: 2, Verdict: probe.VerdictError, Code: "DEED-E011", Error: "store down",
		Checks: []probe.Check{{Name: "update", Inconclusive: true, Detail: "503"}},
	},
}

var probeTextWant = []string{
	"deed probe: s3://b/p at http://127.0.0.1:9000 (scratch prefix deed-probe/0123abcd, 8 racers)\n  PASS  create      1.5ms  created\n  PASS  race         12ms  1 of 8 won\n  PASS  cleanup       1µs  deleted 3 key(s)\nquirks: if-match on missing key -> 404; conditional delete: yes; list after write: yes; quoted etags: yes\nverdict: PASS in 1.23s: the store honours conditional writes\n",
	"deed probe: bucket (scratch prefix scratch, 4 racers)\n  WARN  conditional-delete        2s  unsupported\nquirks: if-match on missing key -> not observed; conditional delete: no; list after write: no; quoted etags: no (quirks table: not-implemented, etag-quoting)\nverdict: PASS with 1 warning(s) in 45ms: the store honours conditional writes\n",
	"deed probe: bucket (scratch prefix p, 2 racers)\n  FAIL  create-rejected       1ms  ignored\n  PASS  etag                   0s  ok\nquirks: if-match on missing key -> not observed; conditional delete: no; list after write: no; quoted etags: no\nverdict: FAIL (DEED-E010): the store does not honour conditional writes; deed must not use it\n",
	"deed probe: bucket (scratch prefix p, 2 racers)\n  ERR   update        0s  503\nquirks: if-match on missing key -> not observed; conditional delete: no; list after write: no; quoted etags: no\nverdict: ERROR (DEED-E011): the probe could not finish: store down\n",
}

func TestProbeText(t *testing.T) {
	for i, r := range probeTextReports {
		var b bytes.Buffer
		if err := writeProbeText(&b, r); err != nil {
			t.Fatal(err)
		}
		if got := b.String(); got != probeTextWant[i] {
			t.Errorf("report %d:\n got %q\nwant %q", i, got, probeTextWant[i])
		}
		probeTextSays(t, b.String(), r)
	}
}

// probeTextSays checks, independently of the goldens, what a probe text
// must say of r: the target, one line per check in order with its status
// and detail, and a last line with the verdict, its code and the error.
func probeTextSays(t *testing.T, text string, r probe.Report) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != len(r.Checks)+3 {
		t.Errorf("%d lines, want a header, %d checks, quirks and verdict:\n%s", len(lines), len(r.Checks), text)
		return
	}
	target := cmp.Or(r.Bucket, "bucket")
	if want := fmt.Sprintf("deed probe: %s (scratch prefix %s, %d racers)", target, r.Prefix, r.Racers); lines[0] != want {
		t.Errorf("header %q, want %q", lines[0], want)
	}
	for i, c := range r.Checks {
		status := "PASS"
		switch {
		case c.Inconclusive:
			status = "ERR"
		case !c.OK:
			status = "FAIL"
		case c.Warning:
			status = "WARN"
		}
		f := strings.Fields(lines[1+i])
		if len(f) < 3 || f[0] != status || f[1] != c.Name || !strings.HasSuffix(lines[1+i], "  "+c.Detail) {
			t.Errorf("check %s: line %q, want %s, its name and %q", c.Name, lines[1+i], status, c.Detail)
		}
	}
	if !strings.HasPrefix(lines[len(lines)-2], "quirks: ") {
		t.Errorf("no quirks line: %q", lines[len(lines)-2])
	}
	verdict := lines[len(lines)-1]
	var want string
	switch r.Verdict {
	case probe.VerdictPass:
		want = "verdict: PASS in "
	case probe.VerdictWarn:
		want = fmt.Sprintf("verdict: PASS with %d warning(s) in ", r.Warnings())
	case probe.VerdictFail:
		want = "verdict: FAIL (" + string(r.Code) + "): "
	case probe.VerdictError:
		want = "verdict: ERROR (" + string(r.Code) + "): "
	}
	if want == "" || !strings.HasPrefix(verdict, want) {
		t.Errorf("verdict line %q, want it to start %q", verdict, want)
	}
	// A probe that could not finish says why (a failed one names its
	// failed checks above).
	if r.Verdict == probe.VerdictError && !strings.HasSuffix(verdict, ": "+r.Error) {
		t.Errorf("verdict line %q, want it to end with the error %q", verdict, r.Error)
	}
	if r.OK != strings.Contains(verdict, "the store honours conditional writes") {
		t.Errorf("verdict line %q for a report with OK=%v", verdict, r.OK)
	}
}

// noConditionalDelete is a store that refuses DELETE with If-Match (501),
// as some S3-compatible stores do.
type noConditionalDelete struct{ bucket.Bucket }

func (s noConditionalDelete) Delete(ctx context.Context, key string, c bucket.Condition) error {
	if c.Conditional() {
		return bucket.Classify("delete", key, c, 501, "NotImplemented", nil)
	}
	return s.Bucket.Delete(ctx, key, c)
}

// The text of real probe runs names the failed check and the verdict: a
// store that ignores conditions fails with DEED-E010 and a failed race; one
// without conditional DELETE passes with one warning.
func TestProbeTextOfRuns(t *testing.T) {
	m := fakes3.NewMem()
	m.SetIgnoreConditions(true)
	rep, _ := probe.Run(t.Context(), m, probe.Options{Racers: 8})
	var b bytes.Buffer
	if err := writeProbeText(&b, rep); err != nil {
		t.Fatal(err)
	}
	probeTextSays(t, b.String(), rep)
	if s := b.String(); !strings.Contains(s, "verdict: FAIL (DEED-E010)") || !strings.Contains(s, "FAIL  race") {
		t.Errorf("text report:\n%s", s)
	}

	rep, err := probe.Run(t.Context(), noConditionalDelete{fakes3.NewMem()}, probe.Options{Racers: 4})
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	b.Reset()
	if err := writeProbeText(&b, rep); err != nil {
		t.Fatal(err)
	}
	probeTextSays(t, b.String(), rep)
	if s := b.String(); !strings.Contains(s, "WARN  conditional-delete") || !strings.Contains(s, "PASS with 1 warning") {
		t.Errorf("text report:\n%s", s)
	}
}
