package bucket_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/storetest"
)

// TestClassify holds Classify to the classification table (storetest.ClassRows):
// a conditional write that did not get a definite answer is ambiguous, never
// "lost"; reads and unconditional writes are merely unavailable.
func TestClassify(t *testing.T) {
	for _, row := range storetest.ClassRows {
		for i, col := range storetest.ClassOps {
			var cause error
			switch row.Name {
			case "timeout":
				cause = context.DeadlineExceeded
			case "connection refused":
				cause = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
			}
			err := bucket.Classify(col.Op, "k", col.Cond, row.Status, row.Code, cause)
			want := row.Want[i]
			if err.Kind != want {
				t.Errorf("%s × %s: %v, want %v", row.Name, col.Name, err.Kind, want)
			}
			for _, k := range storetest.Kinds {
				if errors.Is(err, k) != (k == want) {
					t.Errorf("%s × %s: errors.Is(%v) = %v", row.Name, col.Name, k, !(k == want))
				}
			}
			if cause != nil && !errors.Is(err, cause) {
				t.Errorf("%s × %s: cause not unwrapped", row.Name, col.Name)
			}
			if err.Status != row.Status || err.Code != row.Code || err.Key != "k" || err.Op != col.Op {
				t.Errorf("%s × %s: %+v does not carry the response", row.Name, col.Name, err)
			}
		}
	}
}

// Every classification row of the quirks table is reachable: Classify
// gives its Kind for a response matching it.
func TestQuirksTable(t *testing.T) {
	seen := map[string]bool{}
	for _, q := range bucket.Quirks {
		if seen[q.ID] {
			t.Errorf("duplicate quirk %q", q.ID)
		}
		seen[q.ID] = true
		if q.Seen == "" || q.Behaviour == "" || q.Handling == "" {
			t.Errorf("quirk %q is not documented", q.ID)
		}
		if got, ok := bucket.QuirkByID(q.ID); !ok || got.ID != q.ID {
			t.Errorf("QuirkByID(%q) = %v", q.ID, ok)
		}
		if q.Status == 0 {
			continue
		}
		op := q.Op
		if op == "" || op == "write" {
			op = "put"
		}
		cond := bucket.None
		if len(q.Conds) > 0 {
			cond = bucket.Condition{Kind: q.Conds[0], ETag: `"x"`}
		}
		code := q.Code
		if code == "" {
			code = "SomeCode"
		}
		if e := bucket.Classify(op, "k", cond, q.Status, code, nil); e.Kind != q.Kind {
			t.Errorf("quirk %q: Classify gives %v, want %v", q.ID, e.Kind, q.Kind)
		}
	}
	for _, id := range []string{bucket.QuirkETagQuoting, bucket.QuirkIfMatchMissing404,
		bucket.QuirkConditionalConflict, bucket.QuirkConflictAnyCode, bucket.QuirkNotImplemented,
		bucket.QuirkDeleteMissingOK, bucket.QuirkParentIsFile, bucket.QuirkObjectIsDirectory} {
		if !seen[id] {
			t.Errorf("quirk %q has no row", id)
		}
	}
}

// A conditional write that never left the machine (the name did not
// resolve, the connection was refused) was not applied: it is a refusal
// to retry, not an unknown outcome. Anything after the connection was
// made stays ambiguous.
func TestConditionalWriteNeverSentIsNotAmbiguous(t *testing.T) {
	refused := fmt.Errorf("request send failed: %w", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")})
	noName := fmt.Errorf("request send failed: %w", &net.DNSError{Err: "no such host", Name: "store.invalid"})
	reset := fmt.Errorf("request send failed: %w", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")})
	for _, c := range []struct {
		name  string
		cause error
		want  error
	}{
		{"connection refused", refused, bucket.ErrUnavailable},
		{"name does not resolve", noName, bucket.ErrUnavailable},
		{"reset after sending", reset, bucket.ErrAmbiguous},
		{"timeout", context.DeadlineExceeded, bucket.ErrAmbiguous},
	} {
		for _, cond := range []bucket.Condition{bucket.IfAbsent, bucket.IfMatch(`"e"`)} {
			if got := bucket.Classify("put", "k", cond, 0, "", c.cause); !errors.Is(got, c.want) {
				t.Errorf("%s, %v: %v, want %v", c.name, cond, got.Kind, c.want)
			}
		}
	}
}
