// Package daemontest holds what the daemon's tests and the CLI's
// end-to-end tests share: the answers appends were told, held against the
// log as the bucket holds it afterwards. An acknowledged append must be in
// the log once, a refused one ("applied": "no") not at all, and one of
// unknown outcome (DEED-E012, "applied": "unknown") at most once.
//
// It is imported only from _test.go files.
package daemontest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/replication"
)

// Answer is what one append was told: the HTTP status (200 for an
// acknowledged append), and the code and "applied" of its error.
type Answer struct {
	Data    string
	Status  int
	Code    errcode.Code
	Applied string
}

func (a Answer) String() string {
	return fmt.Sprintf("%q: %d %s applied=%q", a.Data, a.Status, a.Code, a.Applied)
}

// CheckAnswers holds every answer against the records of cell as the
// bucket holds them now. An error answer must carry "applied", "unknown"
// exactly for DEED-E012.
func CheckAnswers(t testing.TB, b bucket.Bucket, cell string, answers []Answer) {
	t.Helper()
	recs, err := replication.Read(context.WithoutCancel(t.Context()), b, cell, 0, 0)
	if err != nil {
		t.Fatalf("read %s: %v", cell, err)
	}
	in := map[string]int{}
	for _, r := range recs {
		in[string(r.Data)]++
	}
	for _, a := range answers {
		switch {
		case a.Status == http.StatusOK:
			if in[a.Data] != 1 {
				t.Errorf("acknowledged %s: in the log %d times", a, in[a.Data])
			}
		case a.Code == errcode.CodeAmbiguous:
			if a.Applied != string(client.AppliedUnknown) {
				t.Errorf("%s: DEED-E012 must say applied unknown", a)
			}
			if in[a.Data] > 1 {
				t.Errorf("unknown %s: in the log %d times", a, in[a.Data])
			}
		default:
			if a.Applied != string(client.AppliedNo) {
				t.Errorf("%s: a refusal must say applied no", a)
			}
			if in[a.Data] != 0 {
				t.Errorf("refused %s, but the record is in the log", a)
			}
		}
	}
}

// SyncBuffer is a bytes.Buffer safe to read while a daemon logs to it or a
// command writes to it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
