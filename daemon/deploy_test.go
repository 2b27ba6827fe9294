package daemon

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v2"
)

// seriesInQuery finds the metric names a PromQL expression reads: deed's
// own, the Go runtime's and the process's.
var seriesInQuery = regexp.MustCompile(`\b(?:deed|go|process)_[a-zA-Z0-9_]+\b`)

// exported reports whether name is a series the scrape has: a family, or a
// histogram's _bucket, _sum or _count.
func exported(fams map[string]*dto.MetricFamily, name string) bool {
	if _, ok := fams[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := fams[base]; ok && f.GetType() == dto.MetricType_HISTOGRAM {
				return true
			}
		}
	}
	return false
}

// TestDeployQueriesExportedSeries checks the example Grafana dashboard and
// Prometheus alert rules under deploy/ parse, cover the alerts operators
// need, and query only series the daemon exports.
func TestDeployQueriesExportedSeries(t *testing.T) {
	fams, _ := scrapeAfterWorkload(t)
	check := func(where, expr string) {
		names := seriesInQuery.FindAllString(expr, -1)
		if len(names) == 0 {
			t.Errorf("%s: %q queries no deed series", where, expr)
		}
		for _, n := range names {
			if !exported(fams, n) {
				t.Errorf("%s: %q queries %s, which the daemon does not export", where, expr, n)
			}
		}
	}

	raw, err := os.ReadFile("../deploy/prometheus-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("alert rules: %v", err)
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			check("alert "+r.Alert, r.Expr)
		}
	}
	for _, want := range []string{"DeedNodeFenced", "DeedRenewalsFailing", "DeedTakeoversSpiking"} {
		if !alerts[want] {
			t.Errorf("alert rules lack %s", want)
		}
	}

	raw, err = os.ReadFile("../deploy/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	if len(dash.Panels) == 0 {
		t.Fatal("dashboard has no panels")
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			check("panel "+p.Title, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(string); ok && v.Type == "query" {
			check("variable", q)
		}
	}
}
