package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/daemon/daemontest"
	"github.com/deedkit/deed/errcode"
)

// holdingProxy stands between a daemon and its store. While armed, it
// holds every record PUT (a key ending in .ltx) until released, then
// forwards it whatever became of the daemon's request meanwhile: a write
// that lands after its writer gave up on it, the case an answer of
// "not applied" must never cover.
type holdingProxy struct {
	target  string
	held    chan string
	release chan struct{}

	mu    sync.Mutex
	armed bool
}

func (p *holdingProxy) arm(on bool) {
	p.mu.Lock()
	p.armed = on
	p.mu.Unlock()
}

func (p *holdingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	p.mu.Lock()
	hold := p.armed && r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, ".ltx")
	p.mu.Unlock()
	if hold {
		p.held <- r.URL.Path
		<-p.release
	}
	out, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	out.Host = r.Host
	out.ContentLength = int64(len(body))
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// deedAppend runs `deed append --json CELL DATA` as its own process and
// returns what it was told: the exit status, and the code and "applied"
// of its error.
func deedAppend(t *testing.T, api, cell, data string) appendAnswer {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 60*time.Second)
	defer cancel()
	// One attempt (--retry-for 0): the answers checked are those of a
	// single request each.
	cmd := exec.CommandContext(ctx, deedBinary(t), "append", "--json", "--retry-for", "0", cell, data)
	cmd.Env = append(os.Environ(), envAddr+"="+api)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run()
	a := appendAnswer{Data: data, Status: cmd.ProcessState.ExitCode()}
	if a.Status == 0 {
		a.Status = http.StatusOK
		return a
	}
	var e struct {
		Code    errcode.Code `json:"code"`
		Applied string       `json:"applied"`
	}
	if err := json.Unmarshal(stderr.Bytes(), &e); err != nil {
		t.Errorf("deed append %s %s: exit %d, stderr %q", cell, data, a.Status, stderr.String())
	}
	a.Code, a.Applied = e.Code, e.Applied
	return a
}

// SIGTERM while appends are in flight (their record PUTs held by the
// store) and queued: the drain cancels the requests a quarter into its
// budget. Each `deed append` is then told DEED-E012 (its PUT was sent;
// here it lands afterwards) or "not written"; every answer is checked
// against the final log. Before the fix the in-flight ones were answered
// DEED-E011, and their records were in the log.
func TestE2EAppendAnswersMatchBucketOnDrain(t *testing.T) {
	c := newE2ECluster(t)
	var s3URL string
	for _, kv := range c.env {
		if v, ok := strings.CutPrefix(kv, envEndpoint+"="); ok {
			s3URL = v
		}
	}
	px := &holdingProxy{target: s3URL, held: make(chan string, 16), release: make(chan struct{})}
	srv := httptest.NewServer(px)
	defer srv.Close()
	released := false
	defer func() {
		if !released {
			close(px.release)
		}
	}()
	env := append(append([]string(nil), c.env...), envEndpoint+"="+srv.URL)
	d := startDeed(t, env, "run", "--node", "node-a", "--listen", anyPort, "--ttl", "2s", "--drain-timeout", "8s")
	api := waitNode(t, d, "node-a")

	cells := []string{"d0", "d1", "d2"}
	var answers []appendAnswer
	for _, cell := range cells {
		a := deedAppend(t, api, cell, cell+"-before")
		if a.Status != http.StatusOK {
			t.Fatalf("warm-up append: %v", a)
		}
		answers = append(answers, a)
	}
	px.arm(true)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, cell := range cells {
		for i := range 3 {
			wg.Go(func() {
				a := deedAppend(t, api, cell, fmt.Sprintf("%s-%d", cell, i))
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			})
		}
	}
	for range cells {
		<-px.held // one record PUT in flight per cell, the others queued
	}
	d.signal(t, syscall.SIGTERM)
	wg.Wait() // every client has its answer: the drain cancelled them
	px.arm(false)
	close(px.release) // the held PUTs land now, after their writers gave up
	released = true
	if code := d.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("drain exited %d", code)
	}

	loc, err := bucket.ParseURL("s3://e2e/test")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s3.Open(t.Context(), loc, s3.Options{Endpoint: s3URL,
		Credentials: credentials.NewStaticCredentialsProvider(c.creds.AccessKeyID, c.creds.SecretAccessKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	unknown := 0
	for _, cell := range cells {
		var mine []appendAnswer
		for _, a := range answers {
			if strings.HasPrefix(a.Data, cell+"-") {
				mine = append(mine, a)
				if a.Code == errcode.CodeAmbiguous {
					unknown++
				}
			}
		}
		daemontest.CheckAnswers(t, b, cell, mine)
	}
	if unknown == 0 {
		t.Errorf("no append was in flight at SIGTERM: %v", answers)
	}
	t.Logf("answers: %v", answers)
}
