// Package s3test gives tests the S3 stores to run against: an in-process
// HTTP fake (always) and versitygw (when DEED_VERSITYGW names its binary).
//
// It is imported only from _test.go files (bucket, owner, replication), so
// that every layer runs the same tables through the real aws-sdk-go-v2 path,
// not just against the in-memory fake.
//
// versitygw is started once per test binary and must be stopped when the
// binary ends, which the testing package has no hook for; a package using
// it needs
//
//	func TestMain(m *testing.M) { s3test.Main(m) }
//
// Without DEED_VERSITYGW, the versitygw targets are skipped (a subtest
// "versitygw" that go test counts as SKIP, see SkipTarget), and only the
// in-process fake runs; with versitygw in DEED_REQUIRE_STORES (`make
// test-s3` sets it) a missing gateway fails the test instead.
package s3test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/internal/nonce"
)

// EnvVersitygw names the environment variable holding the path of the
// versitygw binary (v1.8.0). Unset means: skip the versitygw targets.
const EnvVersitygw = "DEED_VERSITYGW"

// EnvRequireStores names the environment variable listing the store
// targets, by Target.Name and comma-separated ("versitygw",
// "fakegcs,azurite"), that must run: a target it names that cannot be
// started fails the test instead of being skipped. The make targets that
// install a store set it, so that a green `make test-s3` or `make
// test-stores` means the store was tested.
const EnvRequireStores = "DEED_REQUIRE_STORES"

// storeNames are the targets EnvRequireStores may name.
var storeNames = []string{"httpfake", "versitygw", "fakegcs", "azurite"}

// Required reports whether EnvRequireStores names the target name. A name
// in it that no target has fails t, so that a misspelt requirement cannot
// pass as met.
func Required(t testing.TB, name string) bool {
	t.Helper()
	req := false
	for _, n := range strings.Split(os.Getenv(EnvRequireStores), ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
		case !slices.Contains(storeNames, n):
			t.Fatalf("s3test: %s=%q names %q, which is no store target (%s)", EnvRequireStores, os.Getenv(EnvRequireStores), n, strings.Join(storeNames, ", "))
		case n == name:
			req = true
		}
	}
	return req
}

// SkipTarget reports that the store target name cannot run here, for
// reason. When EnvRequireStores names it, t fails. Otherwise the skip is
// a subtest of t named after the target that calls t.Skip, so that go
// test counts it (`--- SKIP: TestX/versitygw`, a "skip" action in -json)
// where a log line would be lost; a t that has no subtests (a benchmark)
// logs it.
func SkipTarget(t testing.TB, name, reason string) {
	t.Helper()
	if Required(t, name) {
		t.Fatalf("store target %s is required (%s) but cannot run: %s", name, EnvRequireStores, reason)
	}
	if r, ok := t.(interface {
		Run(string, func(*testing.T)) bool
	}); ok {
		r.Run(name, func(t *testing.T) { t.Skip(reason) })
		return
	}
	t.Logf("store target %s skipped: %s", name, reason)
}

// The static credentials every target uses. The HTTP fake checks every
// request's signature against them (as `deed fakes3` and the embedded store
// do against their generated ones), so every SDK-path test also exercises
// the fake's SigV4 verification; they also keep the AWS default chain out
// of tests.
const (
	AccessKey = "deedtestaccess"
	SecretKey = "deedtestsecret0123456789"
)

// Target is one store to run a test against.
type Target struct {
	// Name is "httpfake" or "versitygw", for subtest names.
	Name string
	// Bucket is scoped to a fresh, empty bucket (or prefix) of its own.
	Bucket bucket.Bucket
	// Endpoint is the store's URL, for tests that open their own client.
	Endpoint string
	// Loc is where Bucket points.
	Loc bucket.Location
}

// Options returns the s3.Options a test uses to open another client on the
// target (for example a second node).
func (t Target) Options() s3.Options {
	return s3.Options{Endpoint: t.Endpoint, Region: s3.DefaultRegion, Credentials: Credentials()}
}

// Credentials is the static provider for AccessKey/SecretKey.
func Credentials() aws.CredentialsProvider {
	return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: AccessKey, SecretAccessKey: SecretKey, Source: "s3test"}, nil
	})
}

// Targets returns every available store, each with a fresh bucket: the
// in-process HTTP fake always, versitygw when DEED_VERSITYGW is set.
func Targets(t testing.TB) []Target {
	t.Helper()
	ts := []Target{HTTPFake(t)}
	if v, ok := Versitygw(t); ok {
		ts = append(ts, v)
	}
	return ts
}

// HTTPFake starts a fakes3.Server on 127.0.0.1:0 for this test (closed at
// its end) and opens it through s3.Open.
func HTTPFake(t testing.TB) Target {
	t.Helper()
	return HTTPFakeWith(t, fakes3.ServerOptions{})
}

// HTTPFakeWith is HTTPFake with server options (for example
// IgnoreConditions). The bucket "deed-test" is added to opts.Buckets, and
// the server checks signatures against AccessKey/SecretKey unless
// opts.Credentials names others.
func HTTPFakeWith(t testing.TB, opts fakes3.ServerOptions) Target {
	t.Helper()
	const name = "deed-test"
	opts.Buckets = append(slices.Clone(opts.Buckets), name)
	if opts.Credentials == nil {
		opts.Credentials = &fakes3.Credentials{AccessKeyID: AccessKey, SecretAccessKey: SecretKey}
	}
	srv, err := fakes3.NewServer(opts)
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		_ = srv.Close()
		t.Fatalf("s3test: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("s3test: close fake: %v", err)
		}
	})
	return open(t, "httpfake", url, bucket.Location{Bucket: name})
}

func open(t testing.TB, name, endpoint string, loc bucket.Location) Target {
	t.Helper()
	tg := Target{Name: name, Endpoint: endpoint, Loc: loc}
	b, err := s3.Open(t.Context(), loc, tg.Options())
	if err != nil {
		t.Fatalf("s3test: open %s: %v", name, err)
	}
	tg.Bucket = b
	return tg
}

// vgw is the one versitygw process of this test binary.
var vgw struct {
	once     sync.Once
	mainUsed atomic.Bool
	seq      atomic.Int64

	err      error // from the start, set inside once
	mu       sync.Mutex
	proc     *proc
	dir      string
	endpoint string
}

// proc is a started child process and the outcome of waiting for it.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, valid after done
}

// startProc starts cmd from a goroutine locked to its OS thread until the
// child is reaped. On Linux the death signal (setDeathSignal) fires when
// the *thread* that forked the child exits, not the process, and the Go
// runtime ends a thread whenever a goroutine exits while locked to it (as
// deed exec's supervisor does): a gateway forked from a pooled thread was
// killed half-way through cmd/deed's tests when that thread was later
// locked and ended. A thread this goroutine holds is never lent out.
func startProc(cmd *exec.Cmd) (*proc, error) {
	p := &proc{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// Versitygw returns a target on a fresh bucket of the shared versitygw
// process, starting it on first use. ok is false (and the skip reported
// by SkipTarget) when DEED_VERSITYGW is unset.
func Versitygw(t testing.TB) (Target, bool) {
	t.Helper()
	bin := os.Getenv(EnvVersitygw)
	if bin == "" {
		SkipTarget(t, "versitygw", EnvVersitygw+" is not set (make test-s3 sets it)")
		return Target{}, false
	}
	if !vgw.mainUsed.Load() {
		t.Fatalf("s3test: %s is set but this package's TestMain does not call s3test.Main, "+
			"which stops versitygw when the test binary ends", EnvVersitygw)
	}
	vgw.once.Do(func() { vgw.err = startVersitygw(bin) })
	if vgw.err != nil {
		t.Fatalf("s3test: %v", vgw.err)
	}
	vgw.mu.Lock()
	p := vgw.proc
	vgw.mu.Unlock()
	select {
	case <-p.done:
		t.Fatalf("s3test: versitygw (started by this test binary) has exited: %v", p.err)
	default:
	}
	name := fmt.Sprintf("deed-%d-%d-%s", os.Getpid(), vgw.seq.Add(1), nonce.Hex(3))
	if err := createBucket(t.Context(), vgw.endpoint, name); err != nil {
		t.Fatalf("s3test: versitygw: %v", err)
	}
	return open(t, "versitygw", vgw.endpoint, bucket.Location{Bucket: name}), true
}

// Main runs the tests and then stops versitygw if a test started it. Use it
// as the body of TestMain.
func Main(m *testing.M) {
	vgw.mainUsed.Store(true)
	code := m.Run()
	if err := stopVersitygw(); err != nil {
		fmt.Fprintln(os.Stderr, "s3test:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func startVersitygw(bin string) error {
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("versitygw binary from %s: %w", EnvVersitygw, err)
	}
	dir, err := os.MkdirTemp("", "deed-versitygw-")
	if err != nil {
		return fmt.Errorf("create versitygw dir: %w", err)
	}
	// The port is picked by binding :0 and releasing it; another process can
	// take it in between, so a failed start is retried on a new port.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		cmd := exec.Command(bin, "--access", AccessKey, "--secret", SecretKey,
			"--region", s3.DefaultRegion, "--port", addr, "--quiet", "posix", dir)
		// stdout carries only a start-up banner; errors go to stderr.
		cmd.Stderr = os.Stderr
		setDeathSignal(cmd)
		p, err := startProc(cmd)
		if err != nil {
			_ = os.RemoveAll(dir)
			return fmt.Errorf("start versitygw: %w", err)
		}
		endpoint := "http://" + addr
		err = waitReady(endpoint, p, 20*time.Second)
		if err == nil {
			err = verifyServer(endpoint, dir, "deed-probe-"+nonce.Hex(6), p)
		}
		if err != nil {
			_ = p.cmd.Process.Kill()
			<-p.done
			lastErr = err
			continue
		}
		vgw.mu.Lock()
		vgw.proc, vgw.dir, vgw.endpoint = p, dir, endpoint
		vgw.mu.Unlock()
		return nil
	}
	_ = os.RemoveAll(dir)
	return fmt.Errorf("start versitygw: %w", lastErr)
}

// stopVersitygw kills the gateway by its PID and removes its directory.
func stopVersitygw() error {
	vgw.mu.Lock()
	defer vgw.mu.Unlock()
	p := vgw.proc
	if p == nil {
		return nil
	}
	vgw.proc = nil
	pid := p.cmd.Process.Pid
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop versitygw (pid %d): %w", pid, err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("stop versitygw (pid %d): did not exit", pid)
	}
	if err := os.RemoveAll(vgw.dir); err != nil {
		return fmt.Errorf("remove versitygw dir: %w", err)
	}
	return nil
}

// verifyServer proves that the process answering at endpoint is ours and
// not another test binary's gateway that won the same port: go test runs
// packages in parallel, each starting its own versitygw, and a gateway that
// lost the bind race exits while waitReady is answered by the winner. That
// winner then vanishes when its test binary ends, which showed up in CI as
// "connection refused" half-way through a package. A bucket created through
// the endpoint must appear as a directory in our own posix root.
func verifyServer(endpoint, dir, marker string, p *proc) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := createBucket(ctx, endpoint, marker); err != nil {
		return fmt.Errorf("versitygw at %s: %w", endpoint, err)
	}
	if _, err := os.Stat(filepath.Join(dir, marker)); err != nil {
		return fmt.Errorf("versitygw at %s is not the process started here "+
			"(marker bucket missing from %s): port taken by another process", endpoint, dir)
	}
	select {
	case <-p.done:
		return fmt.Errorf("versitygw exited during start: %v", p.err)
	default:
	}
	return nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a port for versitygw: %w", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", fmt.Errorf("pick a port for versitygw: %w", err)
	}
	return addr, nil
}

// waitReady polls until the gateway answers HTTP (any status: an
// unauthenticated request gets 403, which proves it is serving).
func waitReady(endpoint string, p *proc, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-p.done:
			return fmt.Errorf("versitygw exited during start: %v", p.err)
		default:
		}
		resp, err := client.Get(endpoint + "/")
		if err == nil {
			_ = resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw not ready at %s after %v: %w", endpoint, limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func createBucket(ctx context.Context, endpoint, name string) error {
	client := awss3.New(awss3.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       s3.DefaultRegion,
		Credentials:  Credentials(),
		UsePathStyle: true,
	})
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := client.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return fmt.Errorf("create bucket %s: %w", name, err)
	}
	return nil
}
