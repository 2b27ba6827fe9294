package bucket

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/deedkit/deed/errcode"
)

// Sentinel errors. Use errors.Is; the concrete error is an *OpError that says
// which operation, key and HTTP status produced it.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("not found")
	// ErrPrecondition: 412, the condition did not hold and nothing was written.
	ErrPrecondition = errors.New("precondition failed")
	// ErrConflict: 409 ConditionalRequestConflict; nothing was written.
	ErrConflict = errors.New("conditional request conflict")
	// ErrAmbiguous: a conditional write whose outcome is unknown. It may have
	// landed. Never retry it blindly: read the key back.
	ErrAmbiguous = errors.New("ambiguous outcome")
	// ErrUnavailable: a transient store error on a read or an unconditional
	// write (5xx, SlowDown, timeout, connection refused). Safe to retry.
	ErrUnavailable = errors.New("store unavailable")
	// ErrUnsupported: the store rejected the request as not implemented
	// (for example a conditional DELETE on an older store), or as a key it
	// cannot hold (see the posix-* rows of Quirks). Nothing was written, and
	// retrying will not help.
	ErrUnsupported = errors.New("not supported by store")
	// ErrAccessDenied: wrong credentials or missing permissions.
	ErrAccessDenied = errors.New("access denied")
	// ErrNotS3: what answered is not an S3 store (an HTML page, a JSON
	// API, a plain-text 404): the endpoint is misconfigured. Nothing was
	// written, and retrying will not help. Its code is DEED-E040.
	ErrNotS3 = errors.New("the endpoint does not speak S3")
	// ErrNoBucket: the store says the bucket (or container) does not exist:
	// a configuration error (a typo in --bucket, a bucket never created, the
	// wrong account or region). Retrying will not help. Its code is DEED-E040.
	ErrNoBucket = errors.New("the bucket does not exist")
	// ErrTooLarge: a Get found the object larger than the caller's limit
	// and did not read its body (or stopped reading at limit+1 bytes). The
	// Object returned with it still carries the key and the ETag, so a
	// caller may overwrite the object with If-Match. Retrying will not help.
	ErrTooLarge = errors.New("object too large")
)

// Permanent reports whether err is the store refusing the request as such:
// wrong credentials, an operation or key layout it does not support, or an
// endpoint that is not S3 at all. Such a request was not applied, and
// sending it again cannot help, so even for a conditional write it is a
// refusal ("not applied"), never an unknown outcome.
func Permanent(err error) bool {
	return errors.Is(err, ErrAccessDenied) || errors.Is(err, ErrUnsupported) || errors.Is(err, ErrNotS3) || errors.Is(err, ErrNoBucket)
}

// TooLarge is the error a Get returns for an object over its limit max;
// size is the object's size when the store said it, else -1 (the body ran
// past max+1 bytes).
func TooLarge(key string, size, max int64) *OpError {
	cause := fmt.Errorf("body exceeds the limit of %d bytes", max)
	if size >= 0 {
		cause = fmt.Errorf("%d bytes, limit %d", size, max)
	}
	return &OpError{Op: "get", Key: key, Kind: ErrTooLarge, Err: cause}
}

// OpError is the error every Bucket implementation returns. Kind is one of
// the sentinels above; errors.Is(err, ErrPrecondition) and friends match it.
type OpError struct {
	Op     string // "get", "head", "put", "delete", "list"
	Key    string
	Kind   error
	Status int    // HTTP status, 0 when none was received
	Code   string // S3 error code, when the store sent one
	Err    error  // underlying cause, may be nil
	// Bucket names the bucket for an ErrNoBucket, when the adapter knows it.
	Bucket string
}

func (e *OpError) Error() string {
	if e.Kind == ErrNoBucket {
		what := "the bucket"
		if e.Bucket != "" {
			what = fmt.Sprintf("bucket %q", e.Bucket)
		}
		msg := fmt.Sprintf("%s does not exist: check --bucket (or DEED_BUCKET) and the account or region, or create it", what)
		if e.Status != 0 || e.Code != "" {
			msg += fmt.Sprintf(" (%s: %d %s)", strings.TrimSpace(e.Op+" "+e.Key), e.Status, e.Code)
		}
		return msg
	}
	msg := fmt.Sprintf("%s %s: %v", e.Op, e.Key, e.Kind)
	if e.Key == "" { // a LIST of the whole (prefixed) bucket
		msg = fmt.Sprintf("%s: %v", e.Op, e.Kind)
	}
	if e.Status != 0 || e.Code != "" {
		msg += fmt.Sprintf(" (%d %s)", e.Status, e.Code)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches the sentinel kind.
func (e *OpError) Is(target error) bool { return target == e.Kind }

// Unwrap exposes the cause (a context error, a network error).
func (e *OpError) Unwrap() error { return e.Err }

// ErrorCode maps the kind of a storage error to deed's stable code. The
// caller wraps errors with this code when a storage error reaches a user.
func (e *OpError) ErrorCode() errcode.Code {
	switch e.Kind {
	case ErrAmbiguous:
		return errcode.CodeAmbiguous
	case ErrAccessDenied:
		return errcode.CodeUnauthorized
	case ErrNotS3, ErrNoBucket:
		return errcode.CodeBadRequest
	default:
		return errcode.CodeUnavailable
	}
}

// Classify is the single place that turns a transport outcome into a typed
// error. status is the HTTP status (0 if no response arrived), code the S3
// error code, cond the write's condition, and cause the underlying error.
//
// Store-specific rules come first, from the Quirks table (quirks.go): 404
// on a put with If-Match → ErrPrecondition, 409 → ErrConflict (except the
// permanent 409s of posix-backed stores → ErrUnsupported), 501 →
// ErrUnsupported. Then the generic rules:
//   - 412 → ErrPrecondition.
//   - 404 on anything else → ErrNotFound; 404 NoSuchBucket is not a missing
//     key: on a read or an unconditional write it is ErrNoBucket, and on a
//     conditional write it falls through to the last rules (ambiguous, as
//     any answer a write cannot be sure of).
//   - 401/403 → ErrAccessDenied.
//   - anything else on a conditional write → ErrAmbiguous (5xx, timeouts and
//     resets included: the write may have landed, so it is never reported as
//     lost); on a read or unconditional write → ErrUnavailable.
func Classify(op, key string, cond Condition, status int, code string, cause error) *OpError {
	e := &OpError{Op: op, Key: key, Status: status, Code: code, Err: cause}
	write := op == "put" || op == "delete"
	if status == 412 {
		e.Kind = ErrPrecondition
		return e
	}
	// NoSuchBucket is a configuration error, never a statement about a key,
	// so no quirk reinterprets it (a 404 NoSuchBucket on an If-Match put is
	// not a precondition failure).
	if q, ok := matchQuirk(op, cond, status, code); ok && code != "NoSuchBucket" {
		e.Kind = q.Kind
		return e
	}
	switch {
	case status == 404 && code != "NoSuchBucket":
		e.Kind = ErrNotFound
	case status == 404 && !(write && cond.Conditional()):
		e.Kind = ErrNoBucket
	case status == 403 || status == 401:
		e.Kind = ErrAccessDenied
	case write && cond.Conditional() && status == 0 && neverSent(cause):
		// No connection was made, so the request never reached the store:
		// nothing was applied, and saying "unknown" would be less than the
		// truth.
		e.Kind = ErrUnavailable
	case write && cond.Conditional():
		e.Kind = ErrAmbiguous
	default:
		e.Kind = ErrUnavailable
	}
	return e
}

// neverSent reports whether err says the request could not even be sent:
// the name did not resolve, or the connection was refused or could not be
// made. Anything later (a reset, a timeout after the request was written)
// may have reached the store.
func neverSent(err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
