// Package storetest gives tests the non-S3 stores to run against:
// fake-gcs-server (when DEED_FAKEGCS names its binary) and Azurite (when
// DEED_AZURITE names its azurite-blob script). `make test-stores` installs
// both and sets the variables; without them the targets are skipped (a
// subtest per target that go test counts as SKIP, see s3test.SkipTarget),
// which keeps `make test` self-contained, unless DEED_REQUIRE_STORES names
// them (`make test-stores` sets it): then a missing emulator fails.
//
// Each call starts an emulator process of its own on 127.0.0.1, stopped by
// PID when the test ends (and killed by the kernel if the test binary dies
// first: the process handling is fakes3/s3test's), so no TestMain hook is
// needed. A started process must prove it is
// the one answering on its port: fake-gcs-server must serve an object
// seeded from this call's own directory, Azurite must accept a request
// signed with this call's random account key.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/azblob"
	"github.com/deedkit/deed/bucket/gcs"
	"github.com/deedkit/deed/fakes3/s3test"
)

// The variables naming the emulators. Unset means: skip that target.
const (
	EnvFakeGCS = "DEED_FAKEGCS" // the fake-gcs-server binary
	EnvAzurite = "DEED_AZURITE" // Azurite's azurite-blob script (Node)
)

// Target is one store to run a test against.
type Target struct {
	// Name is "fakegcs" or "azurite", for subtest names.
	Name string
	// Bucket is scoped to a fresh, empty bucket or container.
	Bucket bucket.Bucket
	// Loc is where Bucket points (gs://… or az://…).
	Loc bucket.Location
	// Endpoint is the store's URL, for deed's --endpoint flag.
	Endpoint string
	// Env is what a deed process needs in its environment to reach the
	// store (credentials; the endpoint is in Endpoint).
	Env []string
	// Open opens another client on the same bucket (a second node).
	Open func(ctx context.Context) (bucket.Bucket, error)
}

// Targets returns the emulators available in this environment, each
// started for this test on a fresh bucket.
func Targets(t testing.TB) []Target {
	t.Helper()
	var out []Target
	if tg, ok := FakeGCS(t); ok {
		out = append(out, tg)
	}
	if tg, ok := Azurite(t); ok {
		out = append(out, tg)
	}
	return out
}

// FakeGCS starts fake-gcs-server (memory backend) for this test and opens
// a fresh bucket on it through bucket/gcs. ok is false (and the skip
// reported by s3test.SkipTarget) when DEED_FAKEGCS is unset.
func FakeGCS(t testing.TB) (Target, bool) {
	t.Helper()
	bin := os.Getenv(EnvFakeGCS)
	if bin == "" {
		s3test.SkipTarget(t, "fakegcs", EnvFakeGCS+" is not set (make test-stores sets it)")
		return Target{}, false
	}
	// The seed directory holds one bucket with one object, both named at
	// random: only the process started here serves them.
	seed := t.TempDir()
	marker, secret := "seed-"+randHex(6), randHex(8)
	if err := os.MkdirAll(filepath.Join(seed, marker), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(seed, marker, "marker"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	endpoint := start(t, "fake-gcs-server", func(addr string) *exec.Cmd {
		host, port, _ := net.SplitHostPort(addr)
		return exec.Command(bin, "-scheme", "http", "-host", host, "-port", port,
			"-backend", "memory", "-data", seed, "-log-level", "error")
	}, nil, func(ctx context.Context, endpoint string) error {
		body, err := httpGet(ctx, endpoint+"/storage/v1/b/"+marker+"/o/marker?alt=media")
		if err != nil {
			return err
		}
		if body != secret {
			return fmt.Errorf("seeded object reads %q: port taken by another process", body)
		}
		return nil
	})
	name := "deed-" + randHex(6)
	if err := httpPost(t.Context(), endpoint+"/storage/v1/b?project=deed", `{"name":"`+name+`"}`); err != nil {
		t.Fatalf("storetest: fake-gcs-server: create bucket: %v", err)
	}
	loc := bucket.Location{Scheme: "gs", Bucket: name}
	tg := Target{Name: "fakegcs", Loc: loc, Endpoint: endpoint}
	tg.Open = func(ctx context.Context) (bucket.Bucket, error) {
		return gcs.Open(ctx, loc, gcs.Options{Endpoint: endpoint})
	}
	b, err := tg.Open(t.Context())
	if err != nil {
		t.Fatalf("storetest: open fake-gcs-server bucket: %v", err)
	}
	tg.Bucket = b
	return tg, true
}

// Azurite starts Azurite's blob service for this test, with a random
// account of its own, and opens a fresh container through bucket/azblob.
// ok is false (and the skip reported by s3test.SkipTarget) when
// DEED_AZURITE is unset.
func Azurite(t testing.TB) (Target, bool) {
	t.Helper()
	script := os.Getenv(EnvAzurite)
	if script == "" {
		s3test.SkipTarget(t, "azurite", EnvAzurite+" is not set (make test-stores sets it)")
		return Target{}, false
	}
	account := "deed" + randHex(5)
	keyBytes := make([]byte, 32)
	_, _ = rand.Read(keyBytes)
	key := base64.StdEncoding.EncodeToString(keyBytes)
	dir := t.TempDir()
	var connStr string
	endpoint := start(t, "azurite", func(addr string) *exec.Cmd {
		host, port, _ := net.SplitHostPort(addr)
		c := exec.Command("node", script, "--blobHost", host, "--blobPort", port,
			"--silent", "--disableTelemetry", "--skipApiVersionCheck", "--inMemoryPersistence")
		c.Dir = dir // Azurite writes nothing with --inMemoryPersistence; just in case
		return c
	}, []string{"AZURITE_ACCOUNTS=" + account + ":" + key}, func(ctx context.Context, endpoint string) error {
		// A container created with this account's key proves the process
		// is ours: another Azurite does not know the account.
		connStr = connString(endpoint, account, key)
		c, err := container.NewClientFromConnectionString(connStr, "deed-probe-"+randHex(4), nil)
		if err != nil {
			return err
		}
		_, err = c.Create(ctx, nil)
		return err
	})
	name := "deed-" + randHex(6)
	c, err := container.NewClientFromConnectionString(connStr, name, nil)
	if err == nil {
		_, err = c.Create(t.Context(), nil)
	}
	if err != nil {
		t.Fatalf("storetest: Azurite: create container: %v", err)
	}
	loc := bucket.Location{Scheme: "az", Bucket: name}
	tg := Target{Name: "azurite", Loc: loc, Endpoint: endpoint,
		Env: []string{azblob.EnvConnectionString + "=" + connStr}}
	tg.Open = func(ctx context.Context) (bucket.Bucket, error) {
		return azblob.Open(ctx, loc, azblob.Options{ConnectionString: connStr})
	}
	b, err := tg.Open(t.Context())
	if err != nil {
		t.Fatalf("storetest: open Azurite container: %v", err)
	}
	tg.Bucket = b
	return tg, true
}

// connString is Azurite's connection string for an account.
func connString(endpoint, account, key string) string {
	return "DefaultEndpointsProtocol=http;AccountName=" + account + ";AccountKey=" + key +
		";BlobEndpoint=" + endpoint + "/" + account + ";"
}

// start runs the emulator built by cmd on a free port, waits until verify
// passes, and stops it by PID when t ends. The port is picked by binding
// :0 and releasing it; another process can take it in between, which
// verify notices, so a failed start is retried on a new port.
func start(t testing.TB, name string, cmd func(addr string) *exec.Cmd, env []string,
	verify func(ctx context.Context, endpoint string) error) string {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		addr, err := s3test.FreeAddr()
		if err != nil {
			t.Fatalf("storetest: %s: %v", name, err)
		}
		c := cmd(addr)
		c.Env = append(os.Environ(), env...)
		c.Stderr = os.Stderr
		s3test.SetDeathSignal(c)
		done, exitErr, err := s3test.StartProcess(c)
		if err != nil {
			t.Fatalf("storetest: start %s: %v", name, err)
		}
		p := &proc{cmd: c, done: done, exitErr: exitErr}
		endpoint := "http://" + addr
		err = waitReady(name, endpoint, p, verify)
		if err == nil {
			t.Cleanup(func() { p.stop(t, name) })
			return endpoint
		}
		p.stop(t, name)
		lastErr = err
	}
	t.Fatalf("storetest: start %s: %v", name, lastErr)
	return ""
}

// proc is a started emulator.
type proc struct {
	cmd     *exec.Cmd
	done    <-chan struct{}
	exitErr func() error
}

func (p *proc) stop(t testing.TB, name string) {
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("storetest: stop %s (pid %d): %v", name, p.cmd.Process.Pid, err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Errorf("storetest: stop %s (pid %d): did not exit", name, p.cmd.Process.Pid)
	}
}

// waitReady polls verify until it passes, the process exits, or 30 s pass
// (Node starts slowly on a loaded machine).
func waitReady(name, endpoint string, p *proc, verify func(context.Context, string) error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited during start: %v", name, p.exitErr())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := verify(ctx, endpoint)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s: %w", name, endpoint, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func httpGet(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), nil
}

func httpPost(ctx context.Context, url, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Named is a store by name, for tables that need nothing but the bucket.
type Named struct {
	Name   string
	Bucket bucket.Bucket
}

// All returns every store a table runs on: the S3 targets of
// s3test.Targets (the in-process HTTP fake, versitygw under make test-s3)
// and the emulators of Targets (under make test-stores).
func All(t testing.TB) []Named {
	t.Helper()
	var out []Named
	for _, tg := range s3test.Targets(t) {
		out = append(out, Named{tg.Name, tg.Bucket})
	}
	for _, tg := range Targets(t) {
		out = append(out, Named{tg.Name, tg.Bucket})
	}
	return out
}
