package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
)

// A cell's trim point: records below it are no longer to be served. It is
// one small object beside the ownership record, outside the log's prefix
// (walks, restores and GC never list it), so that no owner change touches
// it: a new owner neither writes nor resets it, it only reads it.

// TrimKey is the key of cell's trim point: cells/<cell>/trim.json.
func TrimKey(cell string) string { return owner.CellPrefix(cell) + "trim.json" }

// maxTrimLen bounds what ReadTrim reads of the object.
const maxTrimLen = 4 << 10

type trimBody struct {
	Before Pos `json:"before"`
}

// raiseTrim is the rule of every trim point write: write want over cur only
// when it is higher. With the write conditional on the version cur was read
// from, this is what keeps the point from ever moving back, however many
// nodes (an old owner, a new one) write it at once: a write lands only on
// the version its writer read, and only raises it.
func raiseTrim(cur, want Pos) bool { return want > cur }

// ReadTrim returns cell's trim point (0 when none was ever set) and the
// version read ("" when absent).
func ReadTrim(ctx context.Context, b bucket.Bucket, cell string) (Pos, string, error) {
	o, err := b.Get(ctx, TrimKey(cell), maxTrimLen)
	if errors.Is(err, bucket.ErrNotFound) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", errcode.Wrap(err, "read trim point of %s", cell)
	}
	var t trimBody
	if err := json.Unmarshal(o.Body, &t); err != nil {
		return 0, "", errcode.Errorf(errcode.CodeCorruptOwner, "corrupt trim point %s: %v (delete it to clear the trim)", TrimKey(cell), err)
	}
	return t.Before, o.ETag, nil
}

// maxTrimAttempts bounds RaiseTrim's read-and-write rounds.
const maxTrimAttempts = 8

// RaiseTrim raises cell's trim point to before and returns the point as it
// is now (before, or a higher one someone else set); a lower before changes
// nothing. Each write is conditional on the version just read (create-only
// when there is none); a 412 or an outcome it cannot know is answered by
// reading again, so an ambiguous write that lands later can only have
// landed on the version it read, raising it.
func RaiseTrim(ctx context.Context, b bucket.Bucket, cell string, before Pos) (Pos, error) {
	body, err := json.Marshal(trimBody{Before: before})
	if err != nil {
		return 0, err
	}
	// inDoubt is set once a write's outcome was not learnt: a later failure
	// may then follow a raise that landed, and is answered so (DEED-E012),
	// not as a refusal.
	inDoubt := false
	unknown := func(err error) error {
		if !inDoubt || errcode.CodeOf(err) == errcode.CodeAmbiguous {
			return err
		}
		return errcode.Errorf(errcode.CodeAmbiguous, "trim %s before %d: an earlier write's outcome is unknown and it could not be read back: %v", cell, before, err)
	}
	for range maxTrimAttempts {
		cur, etag, err := ReadTrim(ctx, b, cell)
		if err != nil {
			return 0, unknown(err)
		}
		if !raiseTrim(cur, before) {
			return cur, nil
		}
		cond := bucket.IfAbsent
		if etag != "" {
			cond = bucket.IfMatch(etag)
		}
		if brokenTrimBlind {
			cond = bucket.None
		}
		_, err = b.Put(ctx, TrimKey(cell), body, cond)
		switch {
		case err == nil:
			return before, nil
		case errors.Is(err, bucket.ErrPrecondition):
			continue // someone else's write: read and decide again
		case errors.Is(err, bucket.ErrAmbiguous):
			inDoubt = true
			continue // ours in doubt: read and decide again
		default:
			return 0, unknown(errcode.Wrap(err, "trim %s before %d", cell, before))
		}
	}
	return 0, unknown(errcode.Errorf(errcode.CodeUnavailable, "trim %s before %d: the trim point changed under %d attempts; retry", cell, before, maxTrimAttempts))
}

// TrimmedError is the refusal of a read that starts below the cell's trim
// point (DEED-E046): those records are no longer served. First is the
// first position served (the trim point): a follower restarts from the
// newest snapshot, or reads after First-1.
type TrimmedError struct {
	Cell  string
	After Pos // the read asked for the records after this position
	First Pos
}

func (e *TrimmedError) Error() string {
	return fmt.Sprintf("%s read %s after %d: positions below %d are trimmed (no longer served): restore from the snapshot (GET /v1/cells/%s/snapshot) and read after its position, or read after %d", errcode.CodeTrimmed, e.Cell, e.After, e.First, e.Cell, e.First-1)
}

// ErrorCode is DEED-E046.
func (e *TrimmedError) ErrorCode() errcode.Code { return errcode.CodeTrimmed }

// CheckTrim refuses a read after `after` when it starts below the trim
// point before (the read's first position, after+1, is below it).
func CheckTrim(cell string, after, before Pos) error {
	if before > 1 && after < before-1 {
		return &TrimmedError{Cell: cell, After: after, First: before}
	}
	return nil
}
