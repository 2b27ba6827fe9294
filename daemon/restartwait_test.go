package daemon

import (
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/daemon/daemontest"
	"github.com/deedkit/deed/fakes3"
)

// A daemon restarted under the same node id while its earlier incarnation's
// lease is still live waits TTL+margin before acting, and says so about
// once a second with the time left.
func TestDaemonRestartCountsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := fakes3.NewMem()
		const ttl = 5 * time.Second
		old, err := Open(t.Context(), Config{Node: "a", TTL: ttl}, m.Client("old"), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		m.Partition("old", true) // the earlier process is gone: no more renewals
		var buf daemontest.SyncBuffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		start := time.Now()
		d, err := Open(t.Context(), Config{Node: "a", TTL: ttl}, m.Client("new"), log)
		if err != nil {
			t.Fatal(err)
		}
		waited := time.Since(start)
		closeOK(t, d)
		closeOK(t, old)

		left := regexp.MustCompile(`msg="waiting out this node's earlier incarnation before acting" left=(\S+)`)
		var got []time.Duration
		for _, line := range strings.Split(buf.String(), "\n") {
			if m := left.FindStringSubmatch(line); m != nil {
				d, err := time.ParseDuration(m[1])
				if err != nil {
					t.Fatalf("left=%s: %v", m[1], err)
				}
				got = append(got, d)
			}
		}
		if waited < ttl || len(got) < int(ttl/time.Second) {
			t.Fatalf("waited %v with %d countdown lines %v, want at least one a second over %v:\n%s", waited, len(got), got, ttl, buf.String())
		}
		for i := 1; i < len(got); i++ {
			if got[i] >= got[i-1] {
				t.Fatalf("countdown does not count down: %v", got)
			}
		}
		if got[0] < ttl {
			t.Fatalf("countdown starts at %v, want the whole TTL+margin", got[0])
		}
	})
}
