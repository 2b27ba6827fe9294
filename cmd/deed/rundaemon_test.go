package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/daemon"
	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

// serveDaemon opens an in-process daemon (package daemon, without the
// probe) on b behind httptest, with api's limits and token; wrap, when
// set, wraps its handler. It is closed when the test ends.
func serveDaemon(t *testing.T, b bucket.Bucket, node string, ttl time.Duration, api daemon.APIConfig, wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	d, err := daemon.Open(t.Context(), daemon.Config{Node: node, Advertise: "http://" + node, TTL: ttl, API: api}, b, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h := d.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Close(ctx)
	})
	return srv
}

// apiClient is a Go client of the daemon at url.
func apiClient(t *testing.T, url, token string) *client.Client {
	t.Helper()
	c, err := client.New(url, client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A store that ignores conditions is refused at start with DEED-E010.
func TestDaemonRefusesBrokenStore(t *testing.T) {
	m := fakes3.NewMem()
	m.SetIgnoreConditions(true)
	_, err := openDaemon(t.Context(), daemon.Config{Node: "a", TTL: 2 * time.Second}, m, slog.New(slog.DiscardHandler))
	if errcode.CodeOf(err) != errcode.CodeContract || codeExitStatus(errcode.CodeOf(err)) != 5 {
		t.Fatalf("got %v, want DEED-E010", err)
	}
	if keys := m.Keys("nodes/"); len(keys) != 0 {
		t.Fatalf("a refused daemon wrote %v", keys)
	}
}
