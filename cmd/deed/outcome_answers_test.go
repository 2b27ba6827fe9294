package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/replication"
)

// The answers of appends held against the bucket, for the end-to-end
// outcome test; the daemon package's outcome tests hold the in-process
// daemon's answers the same way.

// appendAnswer is what one append was told.
type appendAnswer struct {
	data    string
	status  int
	code    bucket.Code
	applied string
}

func (a appendAnswer) String() string {
	return fmt.Sprintf("%q: %d %s applied=%q", a.data, a.status, a.code, a.applied)
}

// checkAnswers holds every answer against the records of cell as the
// bucket holds them now. An error answer must carry "applied", "unknown"
// exactly for DEED-E012.
func checkAnswers(t *testing.T, b bucket.Bucket, cell string, answers []appendAnswer) {
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
		case a.status == http.StatusOK:
			if in[a.data] != 1 {
				t.Errorf("acknowledged %s: in the log %d times", a, in[a.data])
			}
		case a.code == bucket.CodeAmbiguous:
			if a.applied != string(client.AppliedUnknown) {
				t.Errorf("%s: DEED-E012 must say applied unknown", a)
			}
			if in[a.data] > 1 {
				t.Errorf("unknown %s: in the log %d times", a, in[a.data])
			}
		default:
			if a.applied != string(client.AppliedNo) {
				t.Errorf("%s: a refusal must say applied no", a)
			}
			if in[a.data] != 0 {
				t.Errorf("refused %s, but the record is in the log", a)
			}
		}
	}
}
