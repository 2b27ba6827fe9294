package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/errcode"
)

// hangingStore accepts connections and never answers: a store whose probe
// does not finish while the test looks.
func hangingStore(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

func storeEnv(endpoint string) []string {
	return []string{"DEED_BUCKET=s3://b", "DEED_ENDPOINT=" + endpoint, "AWS_ACCESS_KEY_ID=deed", "AWS_SECRET_ACCESS_KEY=deed", "AWS_REGION=us-east-1"}
}

// deed run binds its API port before it probes the store: a port in use
// fails at once (it used to fail only after the probe), and while the
// probe hangs /healthz answers and /readyz says not ready (nothing
// answered before).
func TestE2ERunBindsBeforeProbe(t *testing.T) {
	store := hangingStore(t)

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	p := startDeed(t, storeEnv(store), "run", "--node", "n", "--listen", busy.Addr().String())
	if code := p.wait(t, 20*time.Second); code != 2 || !strings.Contains(p.out.String(), string(errcode.CodeBadRequest)) || !strings.Contains(p.out.String(), "address already in use") {
		t.Fatalf("deed run on a port in use: exit %d:\n%s", code, p.out.String())
	}

	p = startDeed(t, storeEnv(store), "run", "--node", "n", "--listen", anyPort)
	api := reported(t, p, apiListening, 20*time.Second)
	waitHTTP(t, p, api+"/healthz", "n", 20*time.Second)
	st, body := get(t, api+"/readyz")
	if st != 503 || !strings.Contains(body, "starting") {
		t.Fatalf("/readyz during the probe: %d %s", st, body)
	}
	st, body = post(t, api+"/v1/cells/c/append", "x")
	if st != 503 || !strings.Contains(body, string(errcode.CodeUnavailable)) || !strings.Contains(body, `"applied":"no"`) {
		t.Fatalf("append during the probe: %d %s", st, body)
	}
}
