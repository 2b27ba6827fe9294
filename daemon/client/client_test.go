package client_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/daemon/client"
)

// Whatever answers, a failure is a *client.Error whose code bucket.CodeOf
// reads, with Applied "unknown" exactly for DEED-E012; a write answered by
// something that did not refuse it (a proxy's 502, a 200 that is not
// deed's) has an unknown outcome.
func TestErrorsCarryCodeAndApplied(t *testing.T) {
	for _, tc := range []struct {
		status    int
		body      string
		readCode  bucket.Code
		writeCode bucket.Code
		owner     string
	}{
		{409, `{"code":"DEED-E020","error":"DEED-E020 cell c is held by live node b","applied":"no","owner":"b","owner_addr":"http://b"}`, bucket.CodeHeld, bucket.CodeHeld, "b"},
		{409, `{"code":"DEED-E021","error":"DEED-E021 lease lost","applied":"no"}`, bucket.CodeSuperseded, bucket.CodeSuperseded, ""},
		{503, `{"code":"DEED-E012","error":"DEED-E012 outcome unknown","applied":"unknown"}`, bucket.CodeAmbiguous, bucket.CodeAmbiguous, ""},
		{503, `{"code":"DEED-E011","error":"DEED-E011 store down","applied":"unknown"}`, bucket.CodeUnavailable, bucket.CodeAmbiguous, ""},
		{502, `<html>bad gateway</html>`, bucket.CodeUnavailable, bucket.CodeAmbiguous, ""},
		{401, `nope`, bucket.CodeUnauthorized, bucket.CodeUnauthorized, ""},
		{200, `not json`, bucket.CodeUnavailable, bucket.CodeAmbiguous, ""},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			fmt.Fprint(w, tc.body)
		}))
		c, err := client.New(srv.URL, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, rerr := c.Read(t.Context(), "c", client.ReadOptions{})
		_, werr := c.Append(t.Context(), "c", []byte("x"))
		srv.Close()
		for _, got := range []struct {
			err  error
			want bucket.Code
		}{{rerr, tc.readCode}, {werr, tc.writeCode}} {
			var ce *client.Error
			if !errors.As(got.err, &ce) {
				t.Fatalf("%d %s: %T %v, want a *client.Error", tc.status, tc.body, got.err, got.err)
			}
			wantApplied := client.AppliedNo
			if got.want == bucket.CodeAmbiguous {
				wantApplied = client.AppliedUnknown
			}
			if ce.Code != got.want || bucket.CodeOf(got.err) != got.want || ce.Applied != wantApplied || ce.Status != tc.status {
				t.Errorf("%d %s: code %s (CodeOf %s) applied %s status %d, want %s %s %d", tc.status, tc.body, ce.Code, bucket.CodeOf(got.err), ce.Applied, ce.Status, got.want, wantApplied, tc.status)
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
	c, err := client.New(url, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Append(t.Context(), "c", []byte("x"))
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != bucket.CodeUnavailable || ce.Applied != client.AppliedNo || ce.Status != 0 {
		t.Errorf("append to a closed port: %v", err)
	}
	for _, bad := range []string{"127.0.0.1:7480", "ftp://h:1", "http://h:1/?x", "http://user:hunter2@[::1"} {
		_, err := client.New(bad, client.Options{})
		if bucket.CodeOf(err) != bucket.CodeBadRequest {
			t.Errorf("New(%q) = %v, want DEED-E040", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("New(%q) printed the password: %v", bad, err)
		}
	}
}
