package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

// A node that may have peers must not run on a store of its own: every
// such node would own every cell. run refuses before touching anything.
func TestRunRefusesEmbeddedStoreForPeers(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"listen off loopback", nil, []string{"--listen", "0.0.0.0:0", "--token", "t"}, "is not loopback"},
		{"node flag", nil, []string{"--node", "web-1"}, "--node"},
		{"node env", map[string]string{envNode: "web-1"}, nil, envNode},
		{"advertise", nil, []string{"--advertise", "http://10.0.0.5:7480"}, "--advertise"},
		{"both stores", nil, []string{"--bucket", "s3://b", "--embedded-store"}, "contradict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			args := append([]string{"run", "--data-dir", dataDir, "--s3-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"}, tc.args...)
			// A refusal returns at once; the bound ends a daemon that
			// wrongly started.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			r := deed(t, ctx, tc.env, args...)
			if r.status != 2 || !strings.HasPrefix(r.stderr, string(errcode.CodeBadRequest)+" ") || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("deed %q: exit %d %q, want 2, %s naming %q", args, r.status, r.stderr, errcode.CodeBadRequest, tc.want)
			}
			if tc.name != "both stores" && !strings.Contains(r.stderr, "--embedded-store") {
				t.Errorf("the refusal does not say how to ask for the embedded store: %s", r.stderr)
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Errorf("refused run created %s (%v)", dataDir, err)
			}
		})
	}
}

// deed's stores serve plain HTTP: they refuse to listen off loopback.
func TestStoresRefuseNonLoopbackListen(t *testing.T) {
	for _, args := range [][]string{
		{"fakes3", "--listen", "0.0.0.0:0"},
		{"fakes3", "--listen", ":0", "--no-auth"},
		{"run", "--data-dir", t.TempDir(), "--s3-listen", "0.0.0.0:0", "--listen", "127.0.0.1:0"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		r := deed(t, ctx, nil, args...)
		cancel()
		if r.status != 2 || !strings.HasPrefix(r.stderr, string(errcode.CodeBadRequest)+" ") || !strings.Contains(r.stderr, "not a loopback address") {
			t.Errorf("deed %q: exit %d %q, want 2 and %s", args, r.status, r.stderr, errcode.CodeBadRequest)
		}
	}
}

// `deed fakes3` checks signatures unless --no-auth asks for an open store,
// and says which it is.
func TestFakes3Credentials(t *testing.T) {
	endpoint, creds, stop := startFake(t)
	if st, body := get(t, endpoint+"/deed?list-type=2"); st != 403 || !strings.Contains(body, "<Code>AccessDenied</Code>") {
		t.Errorf("unsigned list: %d %s, want 403 AccessDenied", st, body)
	}
	if r := deedAs(t, t.Context(), creds, nil, "probe", "--bucket", "s3://deed", "--endpoint", endpoint, "--racers", "4"); r.status != 0 {
		t.Errorf("probe with the printed credentials: exit %d %s", r.status, r.stderr)
	}
	if r := deed(t, t.Context(), nil, "show", "c", "--bucket", "s3://deed", "--endpoint", endpoint); r.status != 2 || !strings.HasPrefix(r.stderr, string(errcode.CodeUnauthorized)) {
		t.Errorf("show with other credentials: exit %d %q, want 2 and %s", r.status, r.stderr, errcode.CodeUnauthorized)
	}
	if res := stop(); !strings.Contains(res.stdout, "must be signed") {
		t.Errorf("banner does not say requests must be signed:\n%s", res.stdout)
	}

	open, _, stopOpen := startFake(t, "--no-auth")
	if st, body := get(t, open+"/deed?list-type=2"); st != 200 {
		t.Errorf("--no-auth unsigned list: %d %s", st, body)
	}
	if res := stopOpen(); !strings.Contains(res.stdout, "WARNING: --no-auth") {
		t.Errorf("--no-auth banner lacks the warning:\n%s", res.stdout)
	}
}

// The embedded store of `deed run` (started as `make run` does: no bucket,
// no node name, loopback) refuses unsigned requests: they cannot list the
// bucket, rewrite a record or delete the node lease. The CLI works with the
// credentials file the daemon generated, and only with it.
func TestE2EEmbeddedStoreChecksSignatures(t *testing.T) {
	dataDir := t.TempDir()
	p := startDeed(t, nil, "run", "--data-dir", dataDir, "--listen", anyPort, "--s3-listen", anyPort, "--ttl", "2s")
	host, _ := os.Hostname()
	api := strings.TrimPrefix(waitNode(t, p, host), "http://")
	s3 := strings.TrimPrefix(reported(t, p, embeddedBanner, time.Second), "http://")
	if st, body := post(t, "http://"+api+"/v1/cells/demo/append", "hello"); st != 200 {
		t.Fatalf("append: %d %s", st, body)
	}

	credsFile := filepath.Join(dataDir, "s3", fakes3.CredentialsFile)
	fi, err := os.Stat(credsFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file: %v %v, want mode 0600", fi, err)
	}
	if !strings.Contains(p.out.String(), credsFile) {
		t.Errorf("banner does not name %s:\n%s", credsFile, p.out.String())
	}
	lease := "http://" + s3 + "/deed/nodes/" + host + ".json"
	st, body := get(t, "http://"+s3+"/deed?list-type=2")
	if st != 403 || strings.Contains(body, "nodes/") {
		t.Errorf("unsigned list: %d %s", st, body)
	}
	for _, method := range []string{"PUT", "DELETE"} {
		req, _ := http.NewRequest(method, lease, strings.NewReader(`{"node":"x"}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Errorf("unsigned %s of the node lease: %d, want 403", method, resp.StatusCode)
		}
	}

	// The CLI: with the generated credentials loaded the way the banner
	// says (a shell sourcing the file), and with the wrong ones.
	sh := func(prefix string) (int, string) {
		cmd := exec.Command("sh", "-c", prefix+` "$DEED" show demo --bucket s3://deed --endpoint http://`+s3)
		cmd.Env = append(os.Environ(), "DEED="+deedBinary(t), "AWS_REGION=us-east-1")
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	if st, out := sh(". " + credsFile + " &&"); st != 0 || !strings.Contains(out, "demo") {
		t.Errorf("show with the credentials file: exit %d %s", st, out)
	}
	if st, out := sh("AWS_ACCESS_KEY_ID=deed AWS_SECRET_ACCESS_KEY=deed"); st != 2 || !strings.HasPrefix(out, string(errcode.CodeUnauthorized)) {
		t.Errorf("show with made-up credentials: exit %d %s, want 2 and %s", st, out, errcode.CodeUnauthorized)
	}
	// Nothing the unsigned requests did fenced the node.
	waitHTTP(t, p, "http://"+api+"/readyz", host, 5*time.Second)
	if st, body := post(t, "http://"+api+"/v1/cells/demo/append", "again"); st != 200 {
		t.Fatalf("append after the refused requests: %d %s", st, body)
	}
}
