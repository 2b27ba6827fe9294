package client

import (
	"errors"
	"fmt"
	"strings"

	"github.com/deedkit/deed/errcode"
)

// Error is every failure a Client returns: the daemon's error answer, or
// the client's own (the daemon unreachable, an answer lost or not deed's).
// errcode.CodeOf reads its code, so errcode.Wrap keeps it.
type Error struct {
	// Code is the DEED code: the daemon's, or the client's own
	// (DEED-E011 when the daemon could not be reached; DEED-E012 when a
	// write reached it but its answer was lost).
	Code errcode.Code
	// Applied says whether the request may have taken effect: "unknown"
	// only with DEED-E012 (read before retrying), else "no" (a retry
	// cannot duplicate it).
	Applied Applied
	// Status is the HTTP status of the answer; 0 when there was none.
	Status int
	// Owner and OwnerAddr name the live owner of a held cell (DEED-E020).
	Owner, OwnerAddr string
	// NextPos is the log's next position on a refused conditional append
	// (DEED-E044); 0 otherwise.
	NextPos uint64
	// FirstPos is the first position still served on a read refused
	// below the cell's trim point (DEED-E046); 0 otherwise.
	FirstPos uint64
	// Msg is the message, led by the code.
	Msg string
	// Err is the cause (a transport error), or nil.
	Err error
}

// newError makes an *Error; a %w verb in format wraps the cause.
func newError(code errcode.Code, status int, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	e := &Error{Code: code, Status: status, Msg: err.Error(), Err: errors.Unwrap(err)}
	e.Applied = AppliedOf(e)
	return e
}

func (e *Error) Error() string {
	if strings.HasPrefix(e.Msg, string(e.Code)) {
		return e.Msg
	}
	return string(e.Code) + " " + e.Msg
}

// ErrorCode is the code, for errcode.CodeOf.
func (e *Error) ErrorCode() errcode.Code { return e.Code }

func (e *Error) Unwrap() error { return e.Err }
