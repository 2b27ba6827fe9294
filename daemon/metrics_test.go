package daemon

import (
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/deedkit/deed/fakes3"
)

// documentedSeries is one row of the metrics table of docs/operations.md: a series name
// (or a name prefix ending in *) and its labels with their documented
// values (none listed: any value).
type documentedSeries struct {
	name   string
	labels map[string][]string
}

// readmeMetrics parses the metrics table of docs/operations.md, the single list of
// the series the daemon documents.
func readmeMetrics(t *testing.T) []documentedSeries {
	t.Helper()
	raw, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	start := strings.Index(text, "| series | labels | meaning |")
	if start < 0 {
		t.Fatal("docs/operations.md has no metrics table")
	}
	tick := regexp.MustCompile("`([^`]+)`(?: \\(([^)]*)\\))?")
	var out []documentedSeries
	for _, line := range strings.Split(text[start:], "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cols := strings.Split(line, "|")
		if len(cols) < 4 {
			t.Fatalf("docs/operations.md metrics row %q: want 3 columns", line)
		}
		labels := map[string][]string{}
		for _, m := range tick.FindAllStringSubmatch(cols[2], -1) {
			var values []string
			if m[2] != "" {
				values = strings.Split(m[2], ", ")
			}
			labels[m[1]] = values
		}
		for _, m := range tick.FindAllStringSubmatch(cols[1], -1) {
			out = append(out, documentedSeries{name: m[1], labels: labels})
		}
	}
	if len(out) == 0 {
		t.Fatal("docs/operations.md metrics table has no rows")
	}
	return out
}

// scrapeAfterWorkload runs a daemon, drives a known workload through its
// API and returns its /metrics, parsed, and the number of appends done.
func scrapeAfterWorkload(t *testing.T) (map[string]*dto.MetricFamily, int) {
	t.Helper()
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	const appends = 7
	for i := range appends {
		if st, res := a.call(t, "POST", "/v1/cells/c1/append", fmt.Sprintf("rec-%d", i)); st != 200 {
			t.Fatalf("append %d: %d %v", i, st, res)
		}
	}
	if st, res := a.call(t, "POST", "/v1/cells/other/release", ""); st != 409 {
		t.Fatalf("release of a cell not held: %d %v", st, res)
	}
	if st, res := a.call(t, "POST", "/v1/cells/c1/release", ""); st != 200 {
		t.Fatalf("release: %d %v", st, res)
	}
	// The cell leaves the held gauge when its lease's end is handled, just
	// after the release is answered.
	waitFor(t, "the released cell to leave deed_cells_held", func() bool {
		var g dto.Metric
		return a.d.m.cellsHeld.Write(&g) == nil && g.GetGauge().GetValue() == 0
	})
	_, res := a.call(t, "GET", "/metrics", "")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(res["raw"].(string)))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams, appends
}

// value returns the value of the series of fam with exactly labels, and
// whether it exists. A histogram's value is its sample count.
func value(fam *dto.MetricFamily, labels map[string]string) (float64, bool) {
	for _, m := range fam.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			if labels[l.GetName()] != l.GetValue() {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetricsMatchDocs scrapes /metrics after a known workload: every
// series the docs document is there with the documented labels and
// every documented value (at 0 if it has not happened), no deed_* series is
// undocumented, no label takes an undocumented value, and the counters
// agree with the workload.
func TestMetricsMatchDocs(t *testing.T) {
	fams, appends := scrapeAfterWorkload(t)
	documented := map[string]bool{}
	for _, s := range readmeMetrics(t) {
		if prefix, ok := strings.CutSuffix(s.name, "*"); ok {
			if prefix == "process_" && runtime.GOOS != "linux" {
				continue // the process collector is complete on Linux only
			}
			found := false
			for name := range fams {
				found = found || strings.HasPrefix(name, prefix)
			}
			if !found {
				t.Errorf("docs/operations.md documents %s: no such series scraped", s.name)
			}
			continue
		}
		documented[s.name] = true
		fam, ok := fams[s.name]
		if !ok {
			t.Errorf("docs/operations.md documents %s: not scraped", s.name)
			continue
		}
		var names []string
		for l := range s.labels {
			names = append(names, l)
		}
		sort.Strings(names)
		seen := map[string]map[string]bool{}
		for _, m := range fam.GetMetric() {
			var got []string
			for _, l := range m.GetLabel() {
				got = append(got, l.GetName())
				if seen[l.GetName()] == nil {
					seen[l.GetName()] = map[string]bool{}
				}
				seen[l.GetName()][l.GetValue()] = true
				if vs := s.labels[l.GetName()]; vs != nil && !slices.Contains(vs, l.GetValue()) {
					t.Errorf("%s{%s=%q}: value not in docs/operations.md (%v)", s.name, l.GetName(), l.GetValue(), vs)
				}
			}
			sort.Strings(got)
			if !slices.Equal(got, names) {
				t.Errorf("%s has labels %v, docs/operations.md says %v", s.name, got, names)
			}
		}
		for l, vs := range s.labels {
			for _, v := range vs {
				if (l == "result" || l == "reason" || l == "outcome") && !strings.Contains(fam.GetHelp(), v) {
					t.Errorf("%s: HELP %q does not name %s %q", s.name, fam.GetHelp(), l, v)
				}
				if !seen[l][v] {
					t.Errorf("%s: no series with %s=%q (documented values exist from the start)", s.name, l, v)
				}
			}
		}
	}
	for name := range fams {
		if strings.HasPrefix(name, "deed_") && !documented[name] {
			t.Errorf("%s is exported but not in the metrics table of docs/operations.md", name)
		}
	}

	// Plausible values for the workload: 7 appends to one cell, which was
	// claimed once, then one release of it and one of a cell not held.
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"deed_appends_total", map[string]string{"result": "ok"}, float64(appends)},
		{"deed_appends_total", map[string]string{"result": "error"}, 0},
		{"deed_claims_total", map[string]string{"result": "ok", "reason": "absent"}, 1},
		{"deed_takeovers_total", map[string]string{"reason": "forced"}, 0},
		{"deed_releases_total", map[string]string{"result": "ok"}, 1},
		{"deed_releases_total", map[string]string{"result": "not_holder"}, 1},
		{"deed_cells_held", nil, 0},
		{"deed_node_lease_held", nil, 1},
		{"deed_node_fences_total", map[string]string{"reason": "unreachable"}, 0},
	}
	for _, c := range checks {
		if got, ok := value(fams[c.name], c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (exists: %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	// Each durable transaction file holds 1..7 records, 7 in all, and took
	// one PUT each against a healthy store.
	rec := fams["deed_txn_records"].GetMetric()[0].GetHistogram()
	puts := fams["deed_txn_puts"].GetMetric()[0].GetHistogram()
	if rec.GetSampleSum() != float64(appends) || rec.GetSampleCount() < 1 || rec.GetSampleCount() > uint64(appends) {
		t.Errorf("deed_txn_records: %d files with %v records, want %d records", rec.GetSampleCount(), rec.GetSampleSum(), appends)
	}
	if puts.GetSampleCount() != rec.GetSampleCount() || puts.GetSampleSum() != float64(puts.GetSampleCount()) {
		t.Errorf("deed_txn_puts: %d files, %v PUTs; want one PUT for each of %d files", puts.GetSampleCount(), puts.GetSampleSum(), rec.GetSampleCount())
	}
	if got, ok := value(fams["deed_s3_requests_total"], map[string]string{"op": "put", "outcome": "ok"}); !ok || got < float64(rec.GetSampleCount()) {
		t.Errorf(`deed_s3_requests_total{op="put",outcome="ok"} = %v, want at least one per transaction file`, got)
	}
	v := testVersion
	if got, ok := value(fams["deed_build_info"], map[string]string{"version": v, "goversion": runtime.Version()}); !ok || got != 1 {
		t.Errorf("deed_build_info{version=%q,goversion=%q} = %v (exists: %v), want 1", v, runtime.Version(), got, ok)
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no go_goroutines: the Go collector is not registered")
	}
}
