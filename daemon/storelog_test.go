package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/daemon/daemontest"
	"github.com/deedkit/deed/fakes3"
)

// sdkOutage wraps a bucket and, while down is set, fails every request the
// way the AWS SDK reports a store that cannot be reached: a typed
// *bucket.OpError around the SDK's long retry and request chain.
type sdkOutage struct {
	bucket.Bucket
	down atomic.Bool
}

func (o *sdkOutage) fail(op, key string, cond bucket.Condition) error {
	if !o.down.Load() {
		return nil
	}
	dial := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 443}, Err: errors.New("connect: connection refused")}
	chain := fmt.Errorf("operation error S3: %s, exceeded maximum number of attempts, 3, https response error StatusCode: 0, RequestID: , HostID: , "+
		"request send failed, %s \"https://deed-bucket.s3.eu-west-1.amazonaws.com/%s?x-id=%sObject\": %w", op, strings.ToUpper(op), key, op, dial)
	return bucket.Classify(op, key, cond, 0, "", chain)
}

func (o *sdkOutage) Get(ctx context.Context, key string, max int64) (bucket.Object, error) {
	if err := o.fail("get", key, bucket.Condition{}); err != nil {
		return bucket.Object{}, err
	}
	return o.Bucket.Get(ctx, key, max)
}

func (o *sdkOutage) Head(ctx context.Context, key string) (bucket.Info, error) {
	if err := o.fail("head", key, bucket.Condition{}); err != nil {
		return bucket.Info{}, err
	}
	return o.Bucket.Head(ctx, key)
}

func (o *sdkOutage) Put(ctx context.Context, key string, body []byte, c bucket.Condition) (string, error) {
	if err := o.fail("put", key, c); err != nil {
		return "", err
	}
	return o.Bucket.Put(ctx, key, body, c)
}

func (o *sdkOutage) Delete(ctx context.Context, key string, c bucket.Condition) error {
	if err := o.fail("delete", key, c); err != nil {
		return err
	}
	return o.Bucket.Delete(ctx, key, c)
}

func (o *sdkOutage) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	if err := o.fail("list", "", bucket.Condition{}); err != nil {
		return bucket.ListPage{}, err
	}
	return o.Bucket.List(ctx, in)
}

// A 40-second store outage is logged as one warning with a short cause, a
// summary every 30 seconds and one at recovery with the count of failures;
// the node's fence is one short error line; every failure's full chain is
// at debug.
func TestDaemonLogsStoreOutageConcisely(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf daemontest.SyncBuffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		store := &sdkOutage{Bucket: fakes3.NewMem().Client("a")}
		const ttl = 2 * time.Second
		d, err := Open(t.Context(), Config{Node: "a", TTL: ttl}, store, log)
		if err != nil {
			t.Fatal(err)
		}
		defer closeOK(t, d)
		time.Sleep(time.Second)
		store.down.Store(true)
		time.Sleep(40 * time.Second)
		store.down.Store(false)
		time.Sleep(2 * ttl) // healed: the node waits out its old lease, then regains it
		synctest.Wait()
		if !d.ready() {
			t.Fatal("daemon did not regain its node lease after the outage")
		}

		var warns, errs []string
		var recovered, fullChain bool
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			switch {
			case strings.Contains(line, "level=WARN"):
				warns = append(warns, line)
			case strings.Contains(line, "level=ERROR"):
				errs = append(errs, line)
			case strings.Contains(line, "level=DEBUG"):
				fullChain = fullChain || strings.Contains(line, "exceeded maximum number of attempts")
			case strings.Contains(line, `msg="store reachable again"`):
				recovered = strings.Contains(line, "after=40s") && !strings.Contains(line, "failures=1 ")
			}
		}
		for _, line := range append(warns, errs...) {
			if len(line) > 400 || strings.Contains(line, "exceeded maximum number of attempts") {
				t.Errorf("%d-character line carries the SDK chain:\n%s", len(line), line)
			}
		}
		if len(warns) != 2 || !strings.Contains(warns[0], "store unreachable") || !strings.Contains(warns[0], "connection refused") ||
			!strings.Contains(warns[1], "store still unreachable") || !strings.Contains(warns[1], "for=30s") {
			t.Errorf("want one warning at the outage's start and one summary at 30s, got %d:\n%s", len(warns), strings.Join(warns, "\n"))
		}
		if len(errs) == 0 || len(errs) > 2 {
			t.Errorf("want the fence as one or two short error lines, got %d:\n%s", len(errs), strings.Join(errs, "\n"))
		}
		if !recovered {
			t.Errorf("no \"store reachable again\" after=40s with its failure count in:\n%s", buf.String())
		}
		if !fullChain {
			t.Error("the full error chain is not logged at debug")
		}
	})
}

// A store request its caller cancelled (a client gone, the drain cutting
// requests short) is no store fault: no "store unreachable" warning, and
// the store is not taken for down.
func TestCancelledStoreRequestIsNoFault(t *testing.T) {
	var buf daemontest.SyncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := &storeHealth{log: log}
	b := instrumented{b: fakes3.NewMem().Client("a"), m: newMetrics(testVersion), h: h}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := b.Get(ctx, "k", 10); err == nil {
		t.Fatal("a cancelled Get succeeded")
	}
	if h.isDown() || strings.Contains(buf.String(), "level=WARN") {
		t.Fatalf("a cancelled request counted as an outage:\n%s", buf.String())
	}
}
