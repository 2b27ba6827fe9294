package main

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deedkit/deed/daemon"
	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
)

// cliDaemon serves an in-process daemon (package daemon) over e's store,
// behind httptest, with a bearer token; it counts the requests it gets.
type cliDaemon struct {
	url      string
	requests atomic.Int64
}

const testToken = "s3cret"

func (e *cellEnv) daemon(t *testing.T, node string) *cliDaemon {
	t.Helper()
	cd := &cliDaemon{}
	srv := serveDaemon(t, e.b, node, time.Second, daemon.APIConfig{Token: testToken, MaxBody: 64, MaxLimit: 1000}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			cd.requests.Add(1)
			h.ServeHTTP(w, r)
		})
	})
	cd.url = srv.URL
	return cd
}

// append reading its record from a pipe or /dev/null stays silent (a
// terminal gets a hint: TestAppendHintOnATerminal).
func TestAppendStdinHint(t *testing.T) {
	e := newCellEnv(t)
	d := e.daemon(t, "d1")
	e.env[envAddr], e.env[envToken] = d.url, testToken
	old := stdin
	t.Cleanup(func() { stdin = old })

	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	pw.WriteString("piped")
	pw.Close()
	stdin = pr
	if r := e.run(t, "append", "c"); r.status != 0 || r.stderr != "" {
		t.Errorf("append from a pipe: exit %d, stderr %q (want silent)", r.status, r.stderr)
	}
	pr.Close()

	// /dev/null is a character device but no terminal: no hint. It reads
	// as empty, so the append itself is refused (DEED-E040). The hint on a
	// terminal is TestAppendHintOnATerminal's (a pseudo-terminal, Linux).
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	stdin = null
	if r := e.run(t, "append", "c"); r.status != 2 || strings.Contains(r.stderr, "reading the record from standard input") || !strings.Contains(r.stderr, "empty append") {
		t.Errorf("append from /dev/null: exit %d, stderr %q (want no hint, the empty-append refusal)", r.status, r.stderr)
	}
}

func TestAppendRead(t *testing.T) {
	e := newCellEnv(t)
	d := e.daemon(t, "d1")
	e.env[envAddr], e.env[envToken] = d.url, testToken

	r := e.run(t, "append", "orders", "first", "--json")
	wantExit(t, r, 0, "")
	if v := decode[client.AppendResult](t, r.stdout); v.TS == 0 || v != (client.AppendResult{Cell: "orders", Epoch: 1, TxID: 1, Pos: 1, TS: v.TS}) {
		t.Fatalf("append = %+v", v)
	}
	// From standard input, with "-" or without DATA; bytes unchanged.
	old := stdin
	t.Cleanup(func() { stdin = old })
	stdin = strings.NewReader("two\nlines")
	r = e.run(t, "append", "orders", "-")
	wantExit(t, r, 0, "")
	if r.stdout != "appended to orders at position 2 (epoch 1, txid 2)\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	stdin = strings.NewReader("third")
	if r := e.run(t, "append", "orders"); r.status != 0 || r.stderr != "" {
		t.Fatalf("append from a reader: exit %d, stderr %q (want silent)", r.status, r.stderr)
	}

	r = e.run(t, "read", "orders")
	wantExit(t, r, 0, "")
	if r.stdout != "1\tfirst\n2\ttwo\nlines\n3\tthird\n" {
		t.Fatalf("read:\n%q", r.stdout)
	}
	r = e.run(t, "read", "orders", "--after", "1", "--limit", "1", "--json", "--barrier")
	wantExit(t, r, 0, "")
	if v := decode[client.Record](t, r.stdout); v.Pos != 2 || string(v.Data) != "two\nlines" || v.Epoch != 1 ||
		!strings.Contains(r.stdout, `"data":"`+base64.StdEncoding.EncodeToString([]byte("two\nlines"))+`"`) {
		t.Fatalf("read --json = %q", r.stdout)
	}
	r = e.run(t, "read", "orders", "--after", "3")
	wantExit(t, r, 0, "")
	if r.stdout != "" {
		t.Errorf("read past the end: %q", r.stdout)
	}

	// Flags beat the environment.
	// An unreachable daemon is retried for --retry-for (30 s by default): asked once here.
	wantExit(t, e.run(t, "read", "orders", "--addr", "http://127.0.0.1:1", "--retry-for", "0"), 1, errcode.CodeUnavailable)
	r = e.run(t, "read", "orders", "--token", "wrong")
	wantExit(t, r, 2, errcode.CodeUnauthorized)
	delete(e.env, envToken)
	wantExit(t, e.run(t, "append", "orders", "x"), 2, errcode.CodeUnauthorized)
	e.env[envToken] = testToken

	// The daemon's own refusals keep their codes and exit statuses.
	r = e.run(t, "append", "orders", strings.Repeat("x", 65))
	wantExit(t, r, 2, errcode.CodeBadRequest)
	wantExit(t, e.run(t, "read", "never-held", "--barrier"), 4, errcode.CodeNotHolder)
	hold := e.start(t, "claim", "taken", "--node", "other", "--hold", "--ttl", "1s")
	hold.waitOut(t, "holding", 10*time.Second)
	r = e.run(t, "append", "taken", "x")
	wantExit(t, r, 4, errcode.CodeHeld)
	if !strings.HasPrefix(r.stderr, "DEED-E020 append taken: ") || !strings.Contains(r.stderr, "held by live node other") {
		t.Errorf("stderr %q", r.stderr)
	}

	// A forced claim from the CLI seals the daemon's epoch: its next append
	// is refused (DEED-E021, exit 3), and everything it acknowledged stays.
	wantExit(t, e.run(t, "claim", "orders", "--node", "ops", "--force"), 0, "")
	r = e.run(t, "append", "orders", "late", "--retry-for", "0")
	wantExit(t, r, 3, errcode.CodeSuperseded)
	r = e.run(t, "read", "orders")
	wantExit(t, r, 0, "")
	if r.stdout != "1\tfirst\n2\ttwo\nlines\n3\tthird\n" {
		t.Fatalf("read after the forced claim:\n%q", r.stdout)
	}
	// By default the refusal is retried with the same key: the daemon
	// claims the cell again and the record lands once.
	wantExit(t, e.run(t, "claim", "orders", "--node", "ops", "--force"), 0, "")
	r = e.run(t, "append", "orders", "late")
	wantExit(t, r, 0, "")
	r = e.run(t, "read", "orders")
	if r.stdout != "1\tfirst\n2\ttwo\nlines\n3\tthird\n4\tlate\n" {
		t.Fatalf("read after the retried append:\n%q", r.stdout)
	}

	// Bad input is refused before any request.
	n := d.requests.Load()
	for _, args := range [][]string{
		{"append", "a/b", "x"}, {"read", ".."}, {"append", "ok", "x", "--addr", "127.0.0.1:7480"},
		{"read", "ok", "--addr", "ftp://h"}, {"read", "ok", "--limit", "-1"}, {"read", "ok", "--poll", "0s"},
		{"append", "ok", "x", "--key", "bad\tkey"}, {"append", "ok", "x", "--match-pos", "0"}, {"append", "ok", "--batch", "/nonexistent"},
		{"append", "ok", "x", "--retry-for", "-1s"}, {"append", "ok", "--batch", "-", "--batch-format", "csv"},
	} {
		r := e.run(t, args...)
		if r.status != 2 {
			t.Errorf("deed %q: exit %d %q, want 2", args, r.status, r.stderr)
		}
	}
	if got := d.requests.Load(); got != n {
		t.Errorf("bad input sent %d requests", got-n)
	}
}

func TestReadFollow(t *testing.T) {
	e := newCellEnv(t)
	d := e.daemon(t, "d1")
	e.env[envAddr], e.env[envToken] = d.url, testToken
	wantExit(t, e.run(t, "append", "log", "a"), 0, "")

	f := e.start(t, "read", "log", "--follow", "--poll", "50ms")
	f.waitOut(t, "1\ta\n", 5*time.Second)
	for i := range 150 { // more than one page
		wantExit(t, e.run(t, "append", "log", fmt.Sprint("r", i)), 0, "")
	}
	f.waitOut(t, "151\tr149\n", 10*time.Second)
	res := f.stop(t)
	wantExit(t, res, 0, "")
	if lines := strings.Count(res.stdout, "\n"); lines != 151 {
		t.Fatalf("%d lines, want 151 (each record once)", lines)
	}
	// --limit ends a follow too.
	r := e.run(t, "read", "log", "--follow", "--after", "149", "--limit", "2")
	wantExit(t, r, 0, "")
	if r.stdout != "150\tr148\n151\tr149\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
}

// TestAPIErrorMapping: whatever the daemon answers, the CLI's exit status
// follows the code; answers that are not deed's are DEED-E011 (or E041/E040
// by HTTP status), except that an append answered by something that did
// not refuse it (a proxy's 502, a 200 that is not deed's) has an unknown
// outcome: DEED-E012, "applied: unknown".
func TestAPIErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		status     int
		body       string
		exit       int
		code       errcode.Code
		appendCode errcode.Code // when it differs from code
	}{
		{409, `{"code":"DEED-E021","error":"DEED-E021 lease lost: cell c epoch 1 superseded"}`, 3, errcode.CodeSuperseded, ""},
		{503, `{"code":"DEED-E025","error":"DEED-E025 node fenced"}`, 3, errcode.CodeNodeFenced, ""},
		{409, `{"code":"DEED-E020","error":"DEED-E020 cell c is held by live node b (http://b) at epoch 2","owner":"b"}`, 4, errcode.CodeHeld, ""},
		{500, `{"code":"DEED-E031","error":"DEED-E031 corrupt transaction file cells/c/ltx/e1/x.ltx"}`, 1, errcode.CodeCorruptTx, ""},
		{503, `{"code":"DEED-E012","error":"DEED-E012 append to c: outcome unknown","applied":"unknown"}`, 1, errcode.CodeAmbiguous, ""},
		{502, `<html>bad gateway</html>`, 1, errcode.CodeUnavailable, errcode.CodeAmbiguous},
		{401, `nope`, 2, errcode.CodeUnauthorized, ""},
		{405, `nope`, 2, errcode.CodeBadRequest, ""},
		{200, `not json`, 1, errcode.CodeUnavailable, errcode.CodeAmbiguous},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			fmt.Fprint(w, tc.body)
		}))
		// The append and the read are sent once: this is the mapping of
		// one answer (the retries are TestAppendRetriesWithOneKey's and
		// TestReadRetriesRetryableRefusals').
		for _, args := range [][]string{{"append", "c", "x", "--retry-for", "0"}, {"read", "c", "--retry-for", "0"}} {
			code := tc.code
			if args[0] == "append" && tc.appendCode != "" {
				code = tc.appendCode
			}
			r := deed(t, t.Context(), map[string]string{envAddr: srv.URL}, args...)
			wantExit(t, r, codeExitStatus(code), code)
			if strings.Count(r.stderr, string(code)) != 1 {
				t.Errorf("code repeated: %q", r.stderr)
			}
			if args[0] == "append" {
				want := "(applied: " + string(client.AppliedOf(errcode.Errorf(code, "x"))) + ")"
				if !strings.HasSuffix(strings.TrimSpace(r.stderr), want) {
					t.Errorf("append answered %d %s: stderr %q does not end with %s", tc.status, tc.body, r.stderr, want)
				}
			}
		}
		srv.Close()
	}
}

// append --key answers a second run from the first; --match-pos refuses a
// taken position (exit 6, naming the next); --batch appends the lines of a
// file atomically.
func TestAppendKeyMatchBatch(t *testing.T) {
	e := newCellEnv(t)
	d := e.daemon(t, "d1")
	e.env[envAddr], e.env[envToken] = d.url, testToken
	first := e.run(t, "append", "c", "v", "--key", "k1", "--json")
	wantExit(t, first, 0, "")
	again := e.run(t, "append", "c", "v", "--key", "k1", "--json")
	wantExit(t, again, 0, "")
	if v := decode[client.AppendResult](t, first.stdout); v.Pos != 1 || strings.Contains(first.stdout, "replayed") || !strings.Contains(again.stdout, `"replayed":true`) ||
		decode[client.AppendResult](t, again.stdout) != v {
		t.Fatalf("first %q, again %q", first.stdout, again.stdout)
	}
	wantExit(t, e.run(t, "append", "c", "w", "--key", "k1"), 2, errcode.CodeKeyReused)
	r := e.run(t, "append", "c", "w", "--match-pos", "1")
	wantExit(t, r, 6, errcode.CodePosMismatch)
	if !strings.Contains(r.stderr, "next position is 2") {
		t.Errorf("mismatch stderr %q", r.stderr)
	}
	wantExit(t, e.run(t, "append", "c", "w", "--match-pos", "2"), 0, "")
	file := t.TempDir() + "/batch.jsonl"
	if err := os.WriteFile(file, []byte("1\r\n[2]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = e.run(t, "append", "c", "--batch", file, "--batch-format", "jsonl")
	wantExit(t, r, 0, "")
	if r.stdout != "appended 2 records to c at positions 3..4 (epoch 1, txid 3)\n" {
		t.Errorf("batch stdout %q", r.stdout)
	}
	if err := os.WriteFile(file, []byte("{\"a\":1}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantExit(t, e.run(t, "append", "c", "--batch", file, "--batch-format", "jsonl"), 2, errcode.CodeBadRequest)
	r = e.run(t, "read", "c")
	if r.stdout != "1\tv\n2\tw\n3\t1\n4\t[2]\n" {
		t.Fatalf("read:\n%q", r.stdout)
	}
}

// deed tail prints the holder's end of the log; -f prints each record
// committed after it, once; deed snapshot writes FILE as the state up to
// --upto, and a position not committed is refused (exit 2).
func TestTailFollowAndSnapshot(t *testing.T) {
	e := newCellEnv(t)
	d := e.daemon(t, "d1")
	e.env[envAddr], e.env[envToken] = d.url, testToken
	wantExit(t, e.run(t, "append", "log", "a"), 0, "")
	wantExit(t, e.run(t, "append", "log", "b"), 0, "")
	r := e.run(t, "tail", "log")
	wantExit(t, r, 0, "")
	if !strings.HasPrefix(r.stdout, "next_pos=3 epoch=1 node=d1 ts=") {
		t.Fatalf("tail: %q", r.stdout)
	}
	n := d.requests.Load()
	f := e.start(t, "tail", "log", "-f")
	for deadline := time.Now().Add(10 * time.Second); d.requests.Load() < n+2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) { // its tail, then its waiting read
			t.Fatal("tail -f sent no waiting read")
		}
	}
	wantExit(t, e.run(t, "append", "log", "c"), 0, "")
	f.waitOut(t, "3\tc\n", 10*time.Second)
	res := f.stop(t)
	wantExit(t, res, 0, "")
	if res.stdout != "3\tc\n" {
		t.Fatalf("tail -f printed %q, want only the record appended after it began", res.stdout)
	}
	state := t.TempDir() + "/state"
	if err := os.WriteFile(state, []byte("ab"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = e.run(t, "snapshot", "log", "--upto", "2", state)
	wantExit(t, r, 0, "")
	if r.stdout != "snapshot log up to 2 (epoch 1, txid 2)\n" {
		t.Fatalf("snapshot: %q", r.stdout)
	}
	wantExit(t, e.run(t, "snapshot", "log", "--upto", "9", state), 2, "DEED-E040")

	// deed trim: past the snapshot's successor (3) only with
	// --past-snapshot, never past the tail (4); a read below it is 410.
	wantExit(t, e.run(t, "trim", "log", "--before", "4"), 2, "DEED-E040")
	wantExit(t, e.run(t, "trim", "log", "--before", "9", "--past-snapshot"), 2, "DEED-E040")
	wantExit(t, e.run(t, "trim", "log"), 2, "DEED-E040")
	r = e.run(t, "trim", "log", "--before", "3")
	wantExit(t, r, 0, "")
	if r.stdout != "trim log before 3 (epoch 1)\n" {
		t.Fatalf("trim: %q", r.stdout)
	}
	r = e.run(t, "trim", "log", "--before", "1", "--json")
	wantExit(t, r, 0, "")
	if !strings.Contains(r.stdout, `"before":3`) {
		t.Fatalf("a lower trim: %q, want the point in effect, 3", r.stdout)
	}
	wantExit(t, e.run(t, "read", "log"), 1, "DEED-E046")
	r = e.run(t, "read", "log", "--after", "2")
	wantExit(t, r, 0, "")
	if !strings.Contains(r.stdout, "c") {
		t.Fatalf("read from the trim point: %q", r.stdout)
	}
}
