package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/probe"
	"github.com/deedkit/deed/daemon/daemontest"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/s3test"
)

// TestMain stops versitygw after the tests when DEED_VERSITYGW started it.
// Started as deed exec's guard (in-process exec tests re-execute the test
// binary), it is that guard instead, and started as the README
// walkthrough's curl (on a machine without curl), that.
func TestMain(m *testing.M) {
	if guardMode() {
		os.Exit(runGuard(os.Stdin, os.Stderr))
	}
	if os.Getenv(curlStandInEnv) == "1" {
		os.Exit(curlStandIn(os.Args[1:], os.Stdout, os.Stderr))
	}
	s3test.Main(m)
}

type result struct {
	status         int
	stdout, stderr string
}

// deed runs the CLI in-process with env as its only DEED_*/AWS_* environment.
func deed(t *testing.T, ctx context.Context, env map[string]string, args ...string) result {
	t.Helper()
	return deedAs(t, ctx, s3test.Credentials(), env, args...)
}

// deedAs is deed with other S3 credentials (a `deed fakes3`'s own).
func deedAs(t *testing.T, ctx context.Context, creds aws.CredentialsProvider, env map[string]string, args ...string) result {
	t.Helper()
	var out, errOut daemontest.SyncBuffer
	status := run(ctx, invocation{
		Args:        args,
		Stdout:      &out,
		Stderr:      &errOut,
		Getenv:      func(k string) string { return env[k] },
		Credentials: creds,
	})
	return result{status, out.String(), errOut.String()}
}

func TestProbePassesOnEveryTarget(t *testing.T) {
	for _, tg := range s3test.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			loc := tg.Loc
			loc.Prefix = "tenant"
			r := deed(t, t.Context(), nil, "probe", "--bucket", loc.String(), "--endpoint", tg.Endpoint)
			if r.status != 0 {
				t.Fatalf("deed probe: exit %d\nstdout:\n%s\nstderr:\n%s", r.status, r.stdout, r.stderr)
			}
			for _, want := range []string{"deed probe: " + loc.String() + " at " + tg.Endpoint, "PASS  race", "verdict: PASS"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
				}
			}
			// Nothing left behind, in the tenant prefix or anywhere else.
			page, err := bucket.ListAll(t.Context(), tg.Bucket, bucket.ListInput{})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Objects) > 0 {
				t.Errorf("probe left %d objects, first %q", len(page.Objects), page.Objects[0].Key)
			}
		})
	}
}

func TestProbeIgnoredConditionsExit5(t *testing.T) {
	tg := s3test.HTTPFakeWith(t, fakes3.ServerOptions{IgnoreConditions: true})
	r := deed(t, t.Context(), nil, "probe", "--bucket", tg.Loc.String(), "--endpoint", tg.Endpoint, "--racers", "8")
	if r.status != 5 {
		t.Fatalf("exit %d, want 5\nstdout:\n%s\nstderr:\n%s", r.status, r.stdout, r.stderr)
	}
	if !strings.HasPrefix(r.stderr, "DEED-E010 ") {
		t.Errorf("stderr = %q, want it to start with DEED-E010", r.stderr)
	}
	if !strings.Contains(r.stdout, "verdict: FAIL (DEED-E010)") || !strings.Contains(r.stdout, "FAIL  create-rejected") {
		t.Errorf("report:\n%s", r.stdout)
	}
}

func TestProbeJSON(t *testing.T) {
	t.Run("pass", func(t *testing.T) {
		tg := s3test.HTTPFake(t)
		r := deed(t, t.Context(), nil, "--json", "probe", "--bucket", tg.Loc.String(), "--endpoint", tg.Endpoint)
		if r.status != 0 {
			t.Fatalf("exit %d, stderr %s", r.status, r.stderr)
		}
		var rep probe.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("stdout is not a JSON report: %v\n%s", err, r.stdout)
		}
		if !rep.OK || rep.Verdict != probe.VerdictPass || len(rep.Checks) != 10 || rep.Quirks.IfMatchMissingStatus != 404 || !rep.Quirks.ListAfterWrite {
			t.Errorf("report = %+v", rep)
		}
	})
	t.Run("fail", func(t *testing.T) {
		tg := s3test.HTTPFakeWith(t, fakes3.ServerOptions{IgnoreConditions: true})
		r := deed(t, t.Context(), nil, "probe", "--json", "--bucket", tg.Loc.String(), "--endpoint", tg.Endpoint, "--racers", "4")
		if r.status != 5 {
			t.Fatalf("exit %d, want 5; stderr %s", r.status, r.stderr)
		}
		var rep map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("stdout: %v\n%s", err, r.stdout)
		}
		if rep["verdict"] != "fail" || rep["code"] != "DEED-E010" {
			t.Errorf("verdict %v code %v", rep["verdict"], rep["code"])
		}
		var e struct{ Code, Error string }
		if err := json.Unmarshal([]byte(r.stderr), &e); err != nil {
			t.Fatalf("stderr is not a JSON error: %v\n%s", err, r.stderr)
		}
		if e.Code != "DEED-E010" || e.Error == "" || strings.HasPrefix(e.Error, "DEED-") {
			t.Errorf("stderr error = %+v", e)
		}
	})
}

// TestBadBucketRejectedBeforeAnyRequest: every configuration mistake is
// DEED-E040 (exit 2), and no request reaches the endpoint.
func TestBadBucketRejectedBeforeAnyRequest(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"no bucket", []string{"probe"}, nil},
		{"not a url", []string{"probe", "--bucket", "my-bucket"}, nil},
		{"wrong scheme", []string{"probe", "--bucket", "https://my-bucket/x"}, nil},
		{"no name", []string{"probe", "--bucket", "s3://"}, nil},
		{"dot-dot prefix", []string{"probe", "--bucket", "s3://b/a/../c"}, nil},
		{"from env", []string{"probe"}, map[string]string{envBucket: "b/c"}},
		{"bad endpoint", []string{"probe", "--bucket", "s3://b", "--endpoint", "localhost:9000"}, nil},
		{"bad scratch prefix", []string{"probe", "--bucket", "s3://b", "--prefix", "a//b"}, nil},
		{"one racer", []string{"probe", "--bucket", "s3://b", "--racers", "1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if !strings.Contains(strings.Join(args, " "), "--endpoint") {
				args = append(args, "--endpoint", srv.URL)
			}
			r := deed(t, t.Context(), tc.env, args...)
			if r.status != 2 || !strings.HasPrefix(r.stderr, "DEED-E040 ") {
				t.Errorf("exit %d stderr %q, want 2 and DEED-E040", r.status, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout = %q, want nothing", r.stdout)
			}
		})
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests reached the endpoint, want 0", n)
	}
}

func TestEnvironment(t *testing.T) {
	tg := s3test.HTTPFake(t)
	for _, env := range []map[string]string{
		{envBucket: tg.Loc.String() + "/a", envEndpoint: tg.Endpoint},
		{envBucket: tg.Loc.String() + "/b", envEndpointS3: tg.Endpoint, envRegion: "eu-west-1"},
		{envBucket: "s3://wrong", envEndpoint: "http://127.0.0.1:1", "flags": "yes"},
	} {
		args := []string{"probe", "--racers", "4"}
		if env["flags"] != "" {
			// Flags win over the environment.
			args = append(args, "--bucket", tg.Loc.String(), "--endpoint", tg.Endpoint)
		}
		if r := deed(t, t.Context(), env, args...); r.status != 0 {
			t.Errorf("env %v: exit %d, stderr %s", env, r.status, r.stderr)
		}
	}
}

func TestUnreachableStoreExit1(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	r := deed(t, t.Context(), nil, "probe", "--bucket", "s3://b", "--endpoint", url, "--timeout", "20s")
	if r.status != 1 || !strings.HasPrefix(r.stderr, "DEED-E011 ") {
		t.Errorf("exit %d stderr %q, want 1 and DEED-E011", r.status, r.stderr)
	}
	if !strings.Contains(r.stderr, "connection refused") {
		t.Errorf("stderr %q does not say why", r.stderr)
	}
}

// --log-format picks slog's JSON or text handler for the log on stderr,
// independently of --json (which only sets the default).
func TestLogFormat(t *testing.T) {
	args := []string{"--bucket", "s3://b", "--endpoint", "http://127.0.0.1:1", "--log-level", "debug"}
	for _, c := range []struct {
		flags []string
		json  bool
	}{{nil, false}, {[]string{"--log-format", "json"}, true}, {[]string{"--log-format", "text", "--json"}, false}, {[]string{"--json"}, true}} {
		r := deed(t, t.Context(), nil, append(append(append([]string{}, args...), c.flags...), "show", "c")...)
		first, _, _ := strings.Cut(r.stderr, "\n")
		var rec map[string]any
		isJSON := json.Unmarshal([]byte(first), &rec) == nil && rec["msg"] == "bucket opened" && rec["level"] == "DEBUG"
		isText := strings.Contains(first, `level=DEBUG msg="bucket opened"`)
		if isJSON != c.json || isText == c.json {
			t.Errorf("%v: first log line %q, want JSON: %v", c.flags, first, c.json)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"no-such-command"},
		{"probe", "--no-such-flag"},
		{"probe", "extra-arg"},
		{"--log-level", "loud", "version"},
		{"--log-format", "xml", "version"},
		{"version", "now"},
	} {
		r := deed(t, t.Context(), nil, args...)
		if r.status != 2 || !strings.HasPrefix(r.stderr, "DEED-E040 ") {
			t.Errorf("deed %q: exit %d stderr %q, want 2 and DEED-E040", args, r.status, r.stderr)
		}
	}
	r := deed(t, t.Context(), nil, "--json", "no-such-command")
	var e map[string]string
	if err := json.Unmarshal([]byte(r.stderr), &e); err != nil || e["code"] != "DEED-E040" {
		t.Errorf("--json usage error: %q (%v)", r.stderr, err)
	}
}

func TestVersion(t *testing.T) {
	r := deed(t, t.Context(), nil, "version")
	if r.status != 0 || !regexp.MustCompile(`^deed \S+ \(go`).MatchString(r.stdout) {
		t.Errorf("exit %d stdout %q", r.status, r.stdout)
	}
	old := version
	version = "v9.9.9"
	t.Cleanup(func() { version = old })
	r = deed(t, t.Context(), nil, "version", "--json")
	var v map[string]string
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v["version"] != "v9.9.9" || v["go"] == "" {
		t.Errorf("version --json = %q (%v)", r.stdout, err)
	}
	// --version prints the same line as the version command.
	want := deed(t, t.Context(), nil, "version")
	r = deed(t, t.Context(), nil, "--version")
	if r.status != 0 || r.stdout != want.stdout || !strings.Contains(r.stdout, "deed v9.9.9 (go") {
		t.Errorf("--version: exit %d stdout %q stderr %q, want %q", r.status, r.stdout, r.stderr, want.stdout)
	}
}

// startFake runs `deed fakes3 args...` in-process and returns its endpoint,
// the credentials its banner prints, and a function that stops it (as
// SIGINT would) and returns its result.
func startFake(t *testing.T, args ...string) (endpoint string, creds aws.CredentialsProvider, stop func() result) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var out, errOut daemontest.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, invocation{
			Args:   append([]string{"fakes3", "--listen", "127.0.0.1:0"}, args...),
			Stdout: &out, Stderr: &errOut,
			Getenv: func(string) string { return "" },
		})
	}()
	re := regexp.MustCompile(`export DEED_ENDPOINT=(\S+)(?s:.*)export AWS_ACCESS_KEY_ID=(\S+)\n  export AWS_SECRET_ACCESS_KEY=(\S+)`)
	// With --dir the banner names the credentials file instead.
	reFile := regexp.MustCompile(`\n  \. (\S+)\n(?s:.*)export DEED_ENDPOINT=(\S+)`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			endpoint = m[1]
			creds = credentials.NewStaticCredentialsProvider(m[2], m[3], "")
			break
		}
		if m := reFile.FindStringSubmatch(out.String()); m != nil {
			c, err := fakes3.LoadCredentials(m[1])
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			endpoint = m[2]
			creds = credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, "")
			break
		}
		select {
		case status := <-done:
			cancel()
			t.Fatalf("deed fakes3 exited %d before serving\nstdout:\n%s\nstderr:\n%s", status, out.String(), errOut.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("deed fakes3 printed no endpoint:\n%s\n%s", out.String(), errOut.String())
		}
	}
	var once sync.Once
	var res result
	stop = func() result {
		once.Do(func() {
			cancel()
			res = result{<-done, out.String(), errOut.String()}
		})
		return res
	}
	t.Cleanup(func() { stop() })
	return endpoint, creds, stop
}

func TestFakes3Command(t *testing.T) {
	dir := t.TempDir()
	endpoint, creds, stop := startFake(t, "--bucket", "play", "--bucket", "s3://other/prefix", "--dir", dir)
	for _, b := range []string{"s3://play/x", "s3://other"} {
		if r := deedAs(t, t.Context(), creds, nil, "probe", "--bucket", b, "--endpoint", endpoint, "--racers", "8"); r.status != 0 {
			t.Errorf("probe %s: exit %d\n%s%s", b, r.status, r.stdout, r.stderr)
		}
	}
	res := stop()
	if res.status != 0 {
		t.Errorf("fakes3 exit %d, stderr %s", res.status, res.stderr)
	}
	credsFile := filepath.Join(dir, fakes3.CredentialsFile)
	for _, want := range []string{"serving " + endpoint, "persisted in " + dir, "buckets: play, other",
		"export DEED_BUCKET=s3://play", "  . " + credsFile + "\n"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("banner lacks %q:\n%s", want, res.stdout)
		}
	}
	// The secret lives in its 0600 file; the banner, which a supervisor
	// keeps in its journal, never prints it.
	c, err := fakes3.LoadCredentials(credsFile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.stdout, c.SecretAccessKey) || strings.Contains(res.stdout, envSecretAccessKey) {
		t.Errorf("the banner of a store with --dir prints its secret key:\n%s", res.stdout)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var out daemontest.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, invocation{Args: []string{"--json", "fakes3", "--listen", "127.0.0.1:0", "--dir", dir}, Stdout: &out, Stderr: io.Discard,
			Getenv: func(string) string { return "" }})
	}()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "\n") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if !strings.Contains(out.String(), credsFile) || strings.Contains(out.String(), c.SecretAccessKey) {
		t.Errorf("--json banner with --dir: %s, want the credentials file and not the secret", out.String())
	}
}

func TestFakes3IgnoreConditions(t *testing.T) {
	endpoint, creds, stop := startFake(t, "--ignore-conditions")
	r := deedAs(t, t.Context(), creds, nil, "probe", "--bucket", "s3://deed", "--endpoint", endpoint, "--racers", "8")
	if r.status != 5 || !strings.HasPrefix(r.stderr, "DEED-E010 ") {
		t.Errorf("probe against --ignore-conditions: exit %d stderr %q, want 5 and DEED-E010", r.status, r.stderr)
	}
	if res := stop(); !strings.Contains(res.stdout, "WARNING: --ignore-conditions") {
		t.Errorf("banner lacks the warning:\n%s", res.stdout)
	}
}

func TestFakes3JSONBanner(t *testing.T) {
	var out, errOut daemontest.SyncBuffer
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, invocation{Args: []string{"--json", "fakes3", "--listen", "127.0.0.1:0"}, Stdout: &out, Stderr: &errOut,
			Getenv: func(k string) string { return map[string]string{envBucket: "s3://from-env/p"}[k] }})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "\n") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if status := <-done; status != 0 {
		t.Fatalf("exit %d, stderr %s", status, errOut.String())
	}
	var banner struct {
		Endpoint string            `json:"endpoint"`
		Buckets  []string          `json:"buckets"`
		Env      map[string]string `json:"env"`
	}
	if err := json.Unmarshal([]byte(out.String()), &banner); err != nil {
		t.Fatalf("banner: %v\n%s", err, out.String())
	}
	if !strings.HasPrefix(banner.Endpoint, "http://127.0.0.1:") || strings.Join(banner.Buckets, ",") != "from-env" ||
		banner.Env[envEndpoint] != banner.Endpoint {
		t.Errorf("banner = %+v", banner)
	}
}

func TestFakes3BadInput(t *testing.T) {
	for _, args := range [][]string{
		{"fakes3", "--listen", "127.0.0.1:0", "--bucket", "Bad_Name"},
		{"fakes3", "--listen", "127.0.0.1:0", "--bucket", "s3://"},
	} {
		r := deed(t, t.Context(), nil, args...)
		if r.status != 2 || !strings.HasPrefix(r.stderr, "DEED-E040 ") {
			t.Errorf("deed %q: exit %d stderr %q", args, r.status, r.stderr)
		}
	}
	// The address is taken: a plain error, exit 1.
	endpoint, _, _ := startFake(t)
	r := deed(t, t.Context(), nil, "fakes3", "--listen", strings.TrimPrefix(endpoint, "http://"))
	if r.status != 1 || !strings.HasPrefix(r.stderr, "DEED-E011 ") {
		t.Errorf("listen on a busy port: exit %d stderr %q", r.status, r.stderr)
	}
}
