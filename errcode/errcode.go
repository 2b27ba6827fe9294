// Package errcode holds deed's stable, user-visible error codes
// ("DEED-Ennn") and the error type that carries them. It is a leaf: every
// layer (bucket and its store adapters, owner, replication, the daemon and
// its client, the CLI) returns these codes, and none of them needs more
// than this package to read one. How a code maps to a process exit status is
// the CLI's business (cmd/deed).
package errcode

import (
	"errors"
	"fmt"
	"strings"
)

// Code is a stable, user-visible error code "DEED-Ennn". Codes are defined
// here, in a package below every other, because every layer returns them
// and they must never be renumbered.
type Code string

// The stable codes (docs/design.md, "Error codes"). Add, never renumber.
const (
	CodeInvalidName  Code = "DEED-E001" // invalid cell or node name
	CodeContract     Code = "DEED-E010" // store fails the conditional-write contract
	CodeUnavailable  Code = "DEED-E011" // store unreachable / transient store error
	CodeAmbiguous    Code = "DEED-E012" // ambiguous outcome could not be resolved
	CodePeer         Code = "DEED-E013" // the node that holds (or is placed to hold) the cell could not be reached; not applied
	CodeBusy         Code = "DEED-E014" // the node serves as many waiting reads (--max-waiting-reads) or event streams (--max-followers) as it may; not applied, retry later or elsewhere
	CodeHeld         Code = "DEED-E020" // cell held by a live node
	CodeSuperseded   Code = "DEED-E021" // lease lost: superseded by a newer epoch
	CodeReleased     Code = "DEED-E022" // lease already released
	CodeInvalidLease Code = "DEED-E023" // invalid (zero or forged) lease
	CodeNotHolder    Code = "DEED-E024" // not the holder
	CodeNodeFenced   Code = "DEED-E025" // node fenced: node lease not renewed in time
	CodeCorruptOwner Code = "DEED-E030" // corrupt ownership record
	CodeCorruptTx    Code = "DEED-E031" // corrupt or truncated transaction file
	CodeCorruptStore Code = "DEED-E032" // corrupt or truncated embedded store file
	CodeBadRequest   Code = "DEED-E040" // request too large / bad request
	CodeUnauthorized Code = "DEED-E041" // unauthorized
	CodeCrossSite    Code = "DEED-E042" // a token-less daemon refused a cross-site or foreign-Host (DNS rebinding) request
	CodeKeyReused    Code = "DEED-E043" // idempotency key already used for another body; not applied
	CodePosMismatch  Code = "DEED-E044" // conditional append: the log's next position is not the one named; not applied
	CodeNoSnapshot   Code = "DEED-E045" // the cell has no snapshot (read its log from the start instead)
	CodeTrimmed      Code = "DEED-E046" // the read starts below the cell's trim point: those records are no longer served (restart from the snapshot or the first position served)
	CodeOutput       Code = "DEED-E050" // the command's output could not be written
)

// Error is an error carrying a stable code. Its message starts with the code
// so that logs, CLI output and HTTP bodies all lead with it.
type Error struct {
	Code Code
	Msg  string
	Err  error
}

// Errorf makes a coded error. A %w verb in format wraps the cause.
func Errorf(code Code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Code: code, Msg: err.Error(), Err: errors.Unwrap(err)}
}

func (e *Error) Error() string {
	if strings.HasPrefix(e.Msg, string(e.Code)) {
		return e.Msg
	}
	return string(e.Code) + " " + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches another *Error with the same code, so callers can write
// errors.Is(err, &errcode.Error{Code: errcode.CodeSuperseded}).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Msg == ""
}

// CodeOf returns the code of the outermost coded error in err's chain, else
// the code of an error with an ErrorCode method (a storage error), else
// CodeUnavailable; "" only for a nil error.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var ce interface{ ErrorCode() Code }
	var de *Error
	if errors.As(err, &de) {
		return de.Code
	}
	if errors.As(err, &ce) {
		return ce.ErrorCode()
	}
	return CodeUnavailable
}

// ErrorCode lets *Error satisfy the interface CodeOf reads, which
// bucket.OpError and the other coded error types implement too.
func (e *Error) ErrorCode() Code { return e.Code }

// Wrap adds context to err and keeps the code first in the message, so that
// wrapping never buries it: Wrap(err, "claim %s", cell) reads
// "DEED-E020 claim c: cell c is held by ...". The result unwraps to err, so
// errors.Is and errors.As see through it. Wrap(nil, ...) is nil.
func Wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	code := CodeOf(err)
	msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), string(code)), " ")
	return &Error{Code: code, Msg: string(code) + " " + fmt.Sprintf(format, args...) + ": " + msg, Err: err}
}
