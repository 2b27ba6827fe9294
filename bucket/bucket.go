// Package bucket is the storage contract deed stands on: an object store whose
// conditional writes are atomic.
//
// Every layer above (owner, replication, the daemon) talks to a Bucket and
// nothing else, so the whole protocol can be run against the in-memory fake in
// fakes3, the HTTP fake, versitygw or AWS S3 without change. The interface is
// deliberately small: the protocol needs get, head, conditional put,
// conditional delete and list, and every extra method would be one more thing
// every store and fake must get right.
//
// Errors are typed so that callers can tell the four outcomes of a
// conditional write apart:
//
//   - ErrPrecondition (412): the condition did not hold; nothing was written.
//   - ErrConflict (409 ConditionalRequestConflict): a concurrent conditional
//     write was in progress; nothing was written, back off and re-read.
//   - ErrNotFound: the key does not exist (reads, and If-Match deletes).
//   - ErrAmbiguous: anything else on a conditional write (timeout, 5xx, reset
//     connection). The write may or may not have landed; only reading the key
//     back can tell.
//
// The stores live in packages of their own beside this one, so that code
// written against the contract links no store's SDK: bucket/s3 (AWS S3 and
// S3-compatible stores), bucket/gcs and bucket/azblob; fakes3 has the
// in-memory fake. bucket/probe checks a store against the contract, and the
// stable error codes that storage errors map to are package errcode.
package bucket

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// DefaultWriteTimeout bounds one conditional write when a store adapter's
// Options.Timeout is zero. A conditional write is never retried by the
// adapters, so a hung request must end on its own for the caller to resolve
// the ambiguity by reading.
const DefaultWriteTimeout = 10 * time.Second

// Bucket is the narrow storage contract used by deed. Keys are relative to
// the bucket's prefix; implementations add the prefix themselves.
//
// Implementations must make Put with IfAbsent or IfMatch atomic: of many
// concurrent conditional writes against one state, at most one succeeds.
type Bucket interface {
	// Get returns the object's body and ETag, or ErrNotFound. With max > 0
	// it never holds more than max+1 bytes of the body in memory: an object
	// whose size exceeds max is ErrTooLarge (see TooLarge), decided from the
	// size the store announces before any of the body is read, else by
	// stopping at byte max+1. The Object still carries Key and ETag then.
	// max ≤ 0 reads the whole body, for objects the caller wrote itself.
	Get(ctx context.Context, key string, max int64) (Object, error)
	// Head returns the object's ETag and size without its body, or ErrNotFound.
	Head(ctx context.Context, key string) (Info, error)
	// Put writes body under key if cond holds and returns the new ETag.
	Put(ctx context.Context, key string, body []byte, cond Condition) (etag string, err error)
	// Delete removes key. With IfMatch it refuses (ErrPrecondition) when the
	// current ETag differs, and reports ErrNotFound when the key is missing
	// (some stores report success instead, see QuirkDeleteMissingOK: treat
	// both as "the version named is gone"). Without a condition, deleting a
	// missing key is not an error.
	Delete(ctx context.Context, key string, cond Condition) error
	// List returns one page of keys under in.Prefix, in lexical order.
	List(ctx context.Context, in ListInput) (ListPage, error)
}

// Object is a stored object: its body and the ETag it was read with.
type Object struct {
	Key  string
	ETag string
	Body []byte
}

// Info describes an object without its body.
type Info struct {
	Key          string
	ETag         string
	Size         int64
	LastModified time.Time
}

// ListInput selects one page of a listing.
type ListInput struct {
	Prefix    string
	Delimiter string // "" for a flat listing
	// StartAfter lists keys strictly after this key (ignored when Token is set).
	StartAfter string
	// Token continues a listing from the NextToken of the previous page.
	Token string
	// MaxKeys bounds the page size; 0 means the store's default (1000 on S3).
	MaxKeys int
}

// ListPage is one page of a listing.
type ListPage struct {
	Objects []Info
	// Prefixes holds the common prefixes when a delimiter was given.
	Prefixes []string
	// NextToken is empty on the last page.
	NextToken string
}

// CondKind says which precondition a write carries.
type CondKind uint8

const (
	// CondNone writes unconditionally.
	CondNone CondKind = iota
	// CondIfAbsent is If-None-Match: * — create only.
	CondIfAbsent
	// CondIfMatch is If-Match: <etag> — replace exactly the version read.
	CondIfMatch
)

// Condition is the precondition of a Put or Delete. The zero value is "none".
type Condition struct {
	Kind CondKind
	ETag string // for CondIfMatch
}

// None is the absent precondition.
var None = Condition{}

// IfAbsent makes a Put create-only (If-None-Match: *).
var IfAbsent = Condition{Kind: CondIfAbsent}

// IfMatch makes a Put or Delete apply only to the version with this ETag.
func IfMatch(etag string) Condition { return Condition{Kind: CondIfMatch, ETag: etag} }

// Conditional reports whether the condition makes the write conditional,
// which is what makes an unknown outcome ambiguous rather than retryable.
func (c Condition) Conditional() bool { return c.Kind != CondNone }

func (c Condition) String() string {
	switch c.Kind {
	case CondIfAbsent:
		return "if-absent"
	case CondIfMatch:
		return "if-match " + c.ETag
	default:
		return "none"
	}
}

// SameETag compares ETags quote-insensitively. Stores differ on whether they
// quote ETags (see the quirks table); the value itself is opaque.
func SameETag(a, b string) bool {
	return a != "" && UnquoteETag(a) == UnquoteETag(b)
}

// UnquoteETag strips one pair of surrounding double quotes and a weak prefix.
func UnquoteETag(s string) string {
	s = strings.TrimPrefix(s, "W/")
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}

// ListAll follows NextToken until the listing ends and returns every page's
// objects and prefixes. It is for small listings (nodes/, a cell's epochs).
func ListAll(ctx context.Context, b Bucket, in ListInput) (ListPage, error) {
	var all ListPage
	for {
		page, err := b.List(ctx, in)
		if err != nil {
			return all, err
		}
		all.Objects = append(all.Objects, page.Objects...)
		all.Prefixes = append(all.Prefixes, page.Prefixes...)
		if page.NextToken == "" {
			return all, nil
		}
		in.Token = page.NextToken
	}
}

// ReadBody finishes a Get with limit max (see Bucket.Get) the same way for
// every store: an announced size over max is refused before a byte of the
// body is read (size < 0: the store announced none), otherwise at most
// max+1 bytes are read. A body that does not arrive whole makes the Get
// unavailable. obj carries the key and ETag, and is returned with them
// when the object is too large.
func ReadBody(obj Object, body io.Reader, size, max int64) (Object, error) {
	if max > 0 && size > max {
		return obj, TooLarge(obj.Key, size, max)
	}
	if max > 0 {
		body = io.LimitReader(body, max+1)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return Object{}, Classify("get", obj.Key, None, 0, "", fmt.Errorf("read body: %w", err))
	}
	if max > 0 && int64(len(b)) > max {
		return obj, TooLarge(obj.Key, -1, max)
	}
	obj.Body = b
	return obj, nil
}
