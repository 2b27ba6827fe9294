package client_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
)

// Whatever answers, a failure is a *client.Error whose code errcode.CodeOf
// reads, with Applied "unknown" exactly for DEED-E012; a write answered by
// something that did not refuse it (a proxy's 502, a 200 that is not
// deed's) has an unknown outcome.
func TestErrorsCarryCodeAndApplied(t *testing.T) {
	for _, tc := range []struct {
		status    int
		body      string
		readCode  errcode.Code
		writeCode errcode.Code
		owner     string
	}{
		{409, `{"code":"DEED-E020","error":"DEED-E020 cell c is held by live node b","applied":"no","owner":"b","owner_addr":"http://b"}`, errcode.CodeHeld, errcode.CodeHeld, "b"},
		{409, `{"code":"DEED-E021","error":"DEED-E021 lease lost","applied":"no"}`, errcode.CodeSuperseded, errcode.CodeSuperseded, ""},
		{503, `{"code":"DEED-E012","error":"DEED-E012 outcome unknown","applied":"unknown"}`, errcode.CodeAmbiguous, errcode.CodeAmbiguous, ""},
		{503, `{"code":"DEED-E011","error":"DEED-E011 store down","applied":"unknown"}`, errcode.CodeUnavailable, errcode.CodeAmbiguous, ""},
		{503, `{"code":"DEED-E013","error":"DEED-E013 cell c: node b could not be reached","applied":"no"}`, errcode.CodePeer, errcode.CodePeer, ""},
		{502, `<html>bad gateway</html>`, errcode.CodeUnavailable, errcode.CodeAmbiguous, ""},
		{401, `nope`, errcode.CodeUnauthorized, errcode.CodeUnauthorized, ""},
		{200, `not json`, errcode.CodeUnavailable, errcode.CodeAmbiguous, ""},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			fmt.Fprint(w, tc.body)
		}))
		// One attempt: this is the mapping of each single answer.
		c, err := client.New(srv.URL, client.Options{RetryFor: -1})
		if err != nil {
			t.Fatal(err)
		}
		_, rerr := c.Read(t.Context(), "c", client.ReadOptions{})
		_, werr := c.Append(t.Context(), "c", []byte("x"))
		srv.Close()
		for _, got := range []struct {
			err  error
			want errcode.Code
		}{{rerr, tc.readCode}, {werr, tc.writeCode}} {
			var ce *client.Error
			if !errors.As(got.err, &ce) {
				t.Fatalf("%d %s: %T %v, want a *client.Error", tc.status, tc.body, got.err, got.err)
			}
			wantApplied := client.AppliedNo
			if got.want == errcode.CodeAmbiguous {
				wantApplied = client.AppliedUnknown
			}
			if ce.Code != got.want || errcode.CodeOf(got.err) != got.want || ce.Applied != wantApplied || ce.Status != tc.status {
				t.Errorf("%d %s: code %s (CodeOf %s) applied %s status %d, want %s %s %d", tc.status, tc.body, ce.Code, errcode.CodeOf(got.err), ce.Applied, ce.Status, got.want, wantApplied, tc.status)
			}
			if got.want == tc.readCode && ce.Owner != tc.owner {
				t.Errorf("%d %s: owner %q, want %q", tc.status, tc.body, ce.Owner, tc.owner)
			}
		}
	}
}

// A daemon that cannot be reached is DEED-E011, applied "no", even for a
// write: nothing was sent. A bad address is DEED-E040 before any request.
func TestUnreachableAndBadAddress(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c, err := client.New(url, client.Options{RetryFor: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Append(t.Context(), "c", []byte("x"))
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != errcode.CodeUnavailable || ce.Applied != client.AppliedNo || ce.Status != 0 {
		t.Errorf("append to a closed port: %v", err)
	}
	for _, bad := range []string{"127.0.0.1:7480", "ftp://h:1", "http://h:1/?x", "http://user:hunter2@[::1"} {
		_, err := client.New(bad, client.Options{})
		if errcode.CodeOf(err) != errcode.CodeBadRequest {
			t.Errorf("New(%q) = %v, want DEED-E040", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("New(%q) printed the password: %v", bad, err)
		}
	}
}

// A daemon whose TLS certificate does not verify is not retried: no retry
// can cure it, so a read or an append answers at once (one handshake, not
// RetryFor's worth of them) with DEED-E011, applied "no", saying so.
func TestUntrustedCertificateIsNotRetried(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes it refuses
	srv.StartTLS()
	defer srv.Close()
	c, err := client.New(srv.URL, client.Options{RetryFor: 30 * time.Second}) // the system's roots only
	if err != nil {
		t.Fatal(err)
	}
	_, rerr := c.Read(t.Context(), "c", client.ReadOptions{})
	_, aerr := c.Append(t.Context(), "c", []byte("x"))
	for _, err := range []error{rerr, aerr} {
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != errcode.CodeUnavailable || ce.Applied != client.AppliedNo || !strings.Contains(err.Error(), "certificate is not trusted") {
			t.Errorf("against an untrusted certificate: %v, want DEED-E011 applied no that says so", err)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections for one read and one append, want 2 (no retries)", n)
	}
}
