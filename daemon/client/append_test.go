package client_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
)

// script is a fake daemon that answers the n-th append with answers[n]
// (the last one again after that) and records the keys it was sent.
type script struct {
	mu      sync.Mutex
	keys    []string
	answers []func(w http.ResponseWriter)
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.keys)
	s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
	a := s.answers[min(n, len(s.answers)-1)]
	s.mu.Unlock()
	a(w)
}

func lost(w http.ResponseWriter) { // the connection drops after the request arrived
	c, _, _ := http.NewResponseController(w).Hijack()
	c.Close()
}

func refuse(code errcode.Code, status int) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		applied := "no"
		if code == errcode.CodeAmbiguous {
			applied = "unknown"
		}
		fmt.Fprintf(w, `{"code":%q,"error":"%s x","applied":%q}`, code, code, applied)
	}
}

func ok(replayed bool) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		fmt.Fprint(w, `{"cell":"c","epoch":2,"txid":5,"pos":9,"ts":1700000000000}`)
	}
}

// Append is exactly-once by default: a lost answer and retryable refusals
// are retried with the same key until the answer comes; a final refusal is
// returned at once; time running out after an unknown outcome is
// DEED-E012, never a refusal.
func TestAppendRetriesWithOneKey(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers []func(http.ResponseWriter)
		ctx     time.Duration // long enough for two attempts on a loaded machine
		code    errcode.Code  // "" = success
		sends   int           // 0 = at least 2
	}{
		{"lost then replayed", []func(http.ResponseWriter){lost, ok(true)}, time.Minute, "", 2},
		{"unavailable, fenced, peer, then ok", []func(http.ResponseWriter){refuse(errcode.CodeUnavailable, 503), refuse(errcode.CodeSuperseded, 409), refuse(errcode.CodePeer, 503), ok(false)}, time.Minute, "", 4},
		{"bad request is final", []func(http.ResponseWriter){refuse(errcode.CodeBadRequest, 400)}, time.Minute, errcode.CodeBadRequest, 1},
		{"mismatch is final", []func(http.ResponseWriter){refuse(errcode.CodePosMismatch, 412)}, time.Minute, errcode.CodePosMismatch, 1},
		{"always unavailable: not written", []func(http.ResponseWriter){refuse(errcode.CodeUnavailable, 503)}, 2 * time.Second, errcode.CodeUnavailable, 0},
		{"lost, then unavailable: unknown", []func(http.ResponseWriter){lost, refuse(errcode.CodeUnavailable, 503)}, 2 * time.Second, errcode.CodeAmbiguous, 0},
		{"lost, then held: unknown", []func(http.ResponseWriter){lost, refuse(errcode.CodeHeld, 409)}, time.Minute, errcode.CodeAmbiguous, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{answers: tc.answers}
			srv := httptest.NewServer(s)
			defer srv.Close()
			c, err := client.New(srv.URL, client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), tc.ctx)
			defer cancel()
			res, err := c.Append(ctx, "c", []byte("x"))
			if got := errcode.CodeOf(err); got != tc.code {
				t.Fatalf("got %s (%v), want %q", got, err, tc.code)
			}
			if err != nil && strings.Count(err.Error(), string(tc.code)) != 1 {
				t.Fatalf("%q names its code %d times, want once", err, strings.Count(err.Error(), string(tc.code)))
			}
			if err == nil && (res.Pos != 9 || res.TS != 1700000000000) {
				t.Fatalf("result %+v", res)
			}
			if err != nil && client.AppliedOf(err) == client.AppliedUnknown != (tc.code == errcode.CodeAmbiguous) {
				t.Fatalf("applied %s for %s", client.AppliedOf(err), tc.code)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if (tc.sends > 0 && len(s.keys) != tc.sends) || (tc.sends == 0 && len(s.keys) < 2) {
				t.Fatalf("%d sends, want %d", len(s.keys), tc.sends)
			}
			for _, k := range s.keys {
				if k == "" || k != s.keys[0] {
					t.Fatalf("keys sent: %q, want one key every time", s.keys)
				}
			}
		})
	}
}

// Each call gets its own key unless the caller names one; match_pos goes
// in the query.
func TestAppendKeysPerCall(t *testing.T) {
	var mu sync.Mutex
	var keys, queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		ok(false)(w)
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL, client.Options{})
	for range 2 {
		if _, err := c.Append(t.Context(), "c", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.AppendWith(t.Context(), "c", []byte("x"), client.AppendOptions{Key: "mine", MatchPos: 7}); err != nil {
		t.Fatal(err)
	}
	if keys[0] == keys[1] || keys[2] != "mine" || queries[2] != "match_pos=7" || queries[0] != "" {
		t.Fatalf("keys %q queries %q", keys, queries)
	}
}

// A read (barrier or not) refused with a code a retry can cure (DEED-E011,
// E013, E025; applied "no") is sent again until answered; any other
// refusal is the answer at once, and with RetryFor < 0 every read is sent
// once.
func TestReadRetriesRetryableRefusals(t *testing.T) {
	records := func(w http.ResponseWriter) {
		fmt.Fprint(w, `{"cell":"c","records":[{"pos":1,"data":"eA=="}]}`)
	}
	for _, tc := range []struct {
		name     string
		answers  []func(http.ResponseWriter)
		retryFor time.Duration
		calls    int
		code     errcode.Code
	}{
		{"moving, unreachable, fenced, then answered", []func(http.ResponseWriter){
			refuse(errcode.CodeUnavailable, 503), refuse(errcode.CodePeer, 503), refuse(errcode.CodeNodeFenced, 503), records}, 0, 4, ""},
		{"held elsewhere: final", []func(http.ResponseWriter){refuse(errcode.CodeHeld, 409), records}, 0, 1, errcode.CodeHeld},
		{"not the holder: final", []func(http.ResponseWriter){refuse(errcode.CodeNotHolder, 409), records}, 0, 1, errcode.CodeNotHolder},
		{"sent once when asked", []func(http.ResponseWriter){refuse(errcode.CodePeer, 503), records}, -1, 1, errcode.CodePeer},
	} {
		s := &script{answers: tc.answers}
		srv := httptest.NewServer(s)
		c, err := client.New(srv.URL, client.Options{RetryFor: tc.retryFor})
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Read(t.Context(), "c", client.ReadOptions{Barrier: true})
		srv.Close()
		if errcode.CodeOf(err) != tc.code || len(s.keys) != tc.calls {
			t.Errorf("%s: %v after %d calls, want %q after %d", tc.name, err, len(s.keys), tc.code, tc.calls)
		}
		if tc.code == "" && len(got.Records) != 1 {
			t.Errorf("%s: records %+v", tc.name, got)
		}
	}
}
