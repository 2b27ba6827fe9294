package docs_test

import (
	"bytes"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/deedkit/deed/daemon"
	"github.com/deedkit/deed/fakes3"
)

// loadSpec reads and validates openapi.yaml (as a 3.1 document).
func loadSpec(t *testing.T, src []byte) *openapi3.T {
	t.Helper()
	l := openapi3.NewLoader()
	doc, err := l.LoadFromData(src)
	if err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi.yaml is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not a valid description: %v", err)
	}
	return doc
}

// apiRoutes returns the "METHOD /path" patterns daemon/api.go registers on
// its ServeMux (the catch-all "/" aside), with {$} dropped.
func apiRoutes(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../daemon/api.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "HandleFunc" && sel.Sel.Name != "Handle") {
			return true
		}
		lit, ok := call.Args[0].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			t.Errorf("%s: a route whose pattern is not a literal: the test cannot read it", fset.Position(call.Pos()))
			return true
		}
		pat, _ := strconv.Unquote(lit.Value)
		if pat == "/" {
			return true // the catch-all: 404 and 405
		}
		method, path, ok := strings.Cut(pat, " ")
		if !ok {
			t.Errorf("%s: route %q has no method", fset.Position(call.Pos()), pat)
			return true
		}
		out = append(out, method+" "+strings.TrimSuffix(path, "{$}"))
		return true
	})
	slices.Sort(out)
	return out
}

// specRoutes returns the "METHOD /path" of every operation in doc.
func specRoutes(doc *openapi3.T) []string {
	var out []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	slices.Sort(out)
	return out
}

// missing returns what a has and b lacks.
func missing(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// TestOpenAPIRoutesMatchTheDaemon fails when a route exists on one side
// only: in daemon/api.go and not in openapi.yaml, or the other way round.
func TestOpenAPIRoutesMatchTheDaemon(t *testing.T) {
	src, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc := loadSpec(t, src)
	code, spec := apiRoutes(t), specRoutes(doc)
	if len(code) < 10 {
		t.Fatalf("found %d routes in daemon/api.go: the parser is broken", len(code))
	}
	for _, r := range missing(code, spec) {
		t.Errorf("daemon/api.go serves %s, which openapi.yaml does not describe", r)
	}
	for _, r := range missing(spec, code) {
		t.Errorf("openapi.yaml describes %s, which daemon/api.go does not serve", r)
	}
}

// TestOpenAPIErrorCodesAreDeeds: the spec's list of codes is errcode's,
// read from its source (a code added there must be added here).
func TestOpenAPIErrorCodesAreDeeds(t *testing.T) {
	src, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc := loadSpec(t, src)
	var spec []string
	for _, v := range doc.Components.Schemas["Error"].Value.Properties["code"].Value.Enum {
		spec = append(spec, v.(string))
	}
	raw, err := os.ReadFile("../errcode/errcode.go")
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, l := range strings.Split(string(raw), "\n") {
		if _, v, ok := strings.Cut(l, `Code = "`); ok {
			codes = append(codes, strings.TrimSuffix(strings.Fields(v)[0], `"`))
		}
	}
	if len(codes) < 10 {
		t.Fatalf("found %d codes in errcode.go: the parser is broken", len(codes))
	}
	slices.Sort(spec)
	slices.Sort(codes)
	if !slices.Equal(spec, codes) {
		t.Errorf("openapi.yaml's codes %v, errcode's %v", spec, codes)
	}
}

// exchange is one request to the test daemon.
type exchange struct {
	method, path, body string
	hdr                []string
	status             int // what the daemon must answer
}

const (
	specToken  = "api-token"
	specSecret = "fleet-secret"
)

// specExchanges drive every route through its answers: successes, and the
// errors a client meets (bad names, held and unheld cells, auth, limits).
func specExchanges() []exchange {
	auth := []string{"Authorization", "Bearer " + specToken}
	return []exchange{
		{"GET", "/healthz", "", nil, 200},
		{"GET", "/readyz", "", nil, 200},
		{"GET", "/metrics", "", auth, 200},
		{"GET", "/metrics", "", nil, 401},
		{"GET", "/", "", auth, 200},
		{"POST", "/v1/cells/a/append", "one", auth, 200},
		{"POST", "/v1/cells/a/append", "two", auth, 200},
		{"POST", "/v1/cells/a/append", "", auth, 400},
		{"POST", "/v1/cells/a/append", strings.Repeat("x", 100), auth, 400},
		{"POST", "/v1/cells/bad%21name/append", "x", auth, 400},
		{"POST", "/v1/cells/a/append", "x", []string{"Authorization", "Bearer wrong"}, 401},
		{"POST", "/v1/cells/k/append", "once", append([]string{"Idempotency-Key", "k1"}, auth...), 200},
		{"POST", "/v1/cells/k/append", "once", append([]string{"Idempotency-Key", "k1"}, auth...), 200}, // replayed
		{"POST", "/v1/cells/k/append", "other", append([]string{"Idempotency-Key", "k1"}, auth...), 422},
		{"POST", "/v1/cells/k/append?match_pos=1", "x", auth, 412},
		{"POST", "/v1/cells/k/append?match_pos=2", "x", auth, 200},
		{"POST", "/v1/cells/k/batch", `{"records":[{"data":"eA=="},{"data":"eQ=="}]}`, append([]string{"Content-Type", "application/json"}, auth...), 200},
		{"POST", "/v1/cells/k/batch", `{"records":[]}`, append([]string{"Content-Type", "application/json"}, auth...), 400},
		{"GET", "/v1/cells/a/records?after=0", "", auth, 200},
		{"GET", "/v1/cells/a/records?after=1&limit=1&barrier=true", "", auth, 200},
		{"GET", "/v1/cells/a/records?limit=100000", "", auth, 400},
		{"GET", "/v1/cells/a/records?after=2&wait=10ms", "", auth, 200},
		{"GET", "/v1/cells/a/records?wait=2m", "", auth, 400},
		{"GET", "/v1/cells/a/records?follow=true", "", auth, 406},
		{"GET", "/v1/cells/a/records?follow=true&wait=1s", "", append([]string{"Accept", "text/event-stream"}, auth...), 400},
		{"GET", "/v1/cells/a/tail", "", auth, 200},
		{"GET", "/v1/cells/a/snapshot", "", auth, 404},
		{"PUT", "/v1/cells/a/snapshot?upto=9", "s", append([]string{"Content-Type", "application/octet-stream"}, auth...), 400},
		{"PUT", "/v1/cells/a/snapshot?upto=2", "s", append([]string{"Content-Type", "application/octet-stream"}, auth...), 200},
		{"GET", "/v1/cells/a/snapshot", "", auth, 200},
		{"POST", "/v1/cells/a/trim?before=9", "", auth, 400},
		{"POST", "/v1/cells/a/trim?before=2", "", auth, 200},
		{"GET", "/v1/cells/a/records?after=0", "", auth, 410},
		{"GET", "/v1/cells/bad%21name/tail", "", auth, 400},
		{"GET", "/v1/cells/a", "", auth, 200},
		{"GET", "/v1/cells/never", "", auth, 200},
		{"GET", "/v1/cells", "", auth, 200},
		{"POST", "/v1/cells/b/claim", "", auth, 200},
		{"POST", "/v1/cells/b/claim?force=true", "", auth, 200},
		{"POST", "/v1/cells/b/release", "", auth, 200},
		{"POST", "/v1/cells/b/release", "", auth, 409},
		{"POST", "/v1/cells/b/move?to=n1", "", auth, 200},
		{"POST", "/v1/cells/b/move?to=nobody", "", auth, 400},
		{"POST", "/v1/cells/never/move?to=n1", "", auth, 400},
		{"POST", "/v1/cells/c/handoff", "", auth, 401},
		{"POST", "/v1/cells/c/handoff", "", []string{"Deed-Peer-Proof", "wrong"}, 401},
		{"POST", "/v1/cells/h/hint", "", append([]string{"Deed-Handoff-ETag", `"e1"`, "Deed-Handoff-Epoch", "1", "Deed-Handoff-End", "txid=2 pos=2"}, auth...), 401},
		{"GET", "/v1/status", "", auth, 200},
		{"POST", "/v1/node/drain", "", auth, 200},
		{"DELETE", "/v1/node/drain", "", auth, 200},
	}
}

// peerExchanges are sent as peer n2's requests, each proved under the
// fleet secret (daemon.SignPeerRequest), as a daemon proves its own.
func peerExchanges() []exchange {
	return []exchange{
		{"POST", "/v1/cells/c/handoff", "", nil, 200},
		{"POST", "/v1/cells/h/hint", "", []string{"Deed-Handoff-ETag", `"e1"`, "Deed-Handoff-Epoch", "1", "Deed-Handoff-End", "txid=2 pos=2"}, 204},
		{"POST", "/v1/cells/h/hint", "", []string{"Deed-Handoff-ETag", `"e1"`}, 400},
	}
}

// openExchanges go to a daemon without a token, which refuses what a
// browser on another site sends (DEED-E042, 403).
func openExchanges() []exchange {
	return []exchange{
		{"GET", "/v1/status", "", nil, 200},
		{"POST", "/v1/cells/e/append", "x", []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"GET", "/v1/cells", "", []string{"Origin", "http://evil.example"}, 403},
	}
}

// TestOpenAPIMatchesTheDaemonsAnswers sends real requests to a daemon and
// checks each request and answer (status, headers' content type, body)
// against openapi.yaml, whose bodies are closed: a field the daemon sends
// that the spec lacks fails, as does one the spec requires that is absent.
// Every operation of the spec must be exercised.
func TestOpenAPIMatchesTheDaemonsAnswers(t *testing.T) {
	src, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range checkAnswers(t, src) {
		t.Error(p)
	}
}

// TestOpenAPICheckCatchesDrift shows the answer check failing on a spec
// that drifted from the daemon: a field renamed, and a status dropped.
func TestOpenAPICheckCatchesDrift(t *testing.T) {
	src, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string][2]string{
		"renamed field": {"        next_after: {type: integer, minimum: 0, description: the position to read after next}",
			"        next_pos: {type: integer, minimum: 0, description: the position to read after next}"},
		"dropped status": {`        "401": {$ref: "#/components/responses/Error"}`, ""}, // the first: GET /metrics's
	} {
		if !bytes.Contains(src, []byte(edit[0])) {
			t.Fatalf("%s: openapi.yaml has no %q to change", name, edit[0])
		}
		bad := bytes.Replace(src, []byte(edit[0]), []byte(edit[1]), 1)
		if len(checkAnswers(t, bad)) == 0 {
			t.Errorf("%s: the check passed a spec that does not match the daemon", name)
		}
	}
}

// checkAnswers runs specExchanges against a fresh daemon and returns every
// mismatch with spec src.
func checkAnswers(t *testing.T, src []byte) []string {
	t.Helper()
	doc := loadSpec(t, src)
	doc.Servers = nil // match the test daemon's address, not the documented default
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(cfg daemon.Config) *httptest.Server {
		d, err := daemon.Open(t.Context(), cfg, fakes3.NewMem().Client(cfg.Node), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(d.Handler())
		t.Cleanup(func() {
			srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = d.Close(ctx)
		})
		return srv
	}
	srv := serve(daemon.Config{
		Node: "n1", Advertise: "http://127.0.0.1:1", TTL: 3 * time.Second, Version: "v0.0.0-spec",
		FleetSecret: specSecret,
		API:         daemon.APIConfig{Token: specToken, MaxBody: 64, MaxLimit: 1000},
	})
	open := serve(daemon.Config{
		Node: "n2", Advertise: "http://127.0.0.1:1", TTL: 3 * time.Second, Version: "v0.0.0-spec",
		API: daemon.APIConfig{MaxBody: 64, MaxLimit: 1000},
	})
	opts := &openapi3filter.Options{
		IncludeResponseStatus:   true,
		MultiError:              true,
		AuthenticationFunc:      openapi3filter.NoopAuthenticationFunc,
		SchemaValidationOptions: []openapi3.SchemaValidationOption{openapi3.EnableJSONSchema2020()},
	}
	html := func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		b, err := io.ReadAll(body)
		return string(b), err
	}
	openapi3filter.RegisterBodyDecoder("text/html", html)
	var problems []string
	covered := map[*openapi3.Operation]bool{}
	all := specExchanges()
	nTokened := len(all)
	all = append(all, peerExchanges()...)
	nPeer := len(all)
	all = append(all, openExchanges()...)
	for i, ex := range all {
		what := ex.method + " " + ex.path
		base := srv.URL
		switch {
		case i >= nPeer:
			base, what = open.URL, what+" (no token)"
		case i >= nTokened:
			what += " (a peer's)"
		}
		req, err := http.NewRequestWithContext(t.Context(), ex.method, base+ex.path, strings.NewReader(ex.body))
		if err != nil {
			t.Fatal(err)
		}
		if ex.method == "POST" {
			req.Header.Set("Content-Type", "application/octet-stream")
		}
		for i := 0; i+1 < len(ex.hdr); i += 2 {
			req.Header.Set(ex.hdr[i], ex.hdr[i+1])
		}
		if i >= nTokened && i < nPeer {
			daemon.SignPeerRequest(req, specSecret, "n2", "n1", []byte(ex.body))
		}
		route, params, err := router.FindRoute(req)
		if err != nil {
			problems = append(problems, what+": not in openapi.yaml: "+err.Error())
			continue
		}
		covered[route.Operation] = true
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
		if ex.status < 400 {
			// A request the daemon accepts must be one the spec allows
			// (a refused one may be malformed on purpose).
			if err := openapi3filter.ValidateRequest(t.Context(), in); err != nil {
				problems = append(problems, what+": the request does not match openapi.yaml: "+err.Error())
			}
			req.Body = io.NopCloser(strings.NewReader(ex.body))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != ex.status {
			problems = append(problems, what+": the daemon answered "+resp.Status+", the exchange expects "+strconv.Itoa(ex.status)+": "+string(body))
			continue
		}
		if ex.status >= 400 && !bytes.Contains(body, []byte(`"code":"DEED-E`)) {
			problems = append(problems, what+": an error without its code: "+string(body))
		}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: opts}
		out.SetBodyBytes(body)
		if err := openapi3filter.ValidateResponse(t.Context(), out); err != nil {
			problems = append(problems, what+": the answer does not match openapi.yaml: "+err.Error()+"\n  body: "+string(body))
		}
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if !covered[op] {
				problems = append(problems, method+" "+path+": no exchange exercises it")
			}
		}
	}
	return problems
}
