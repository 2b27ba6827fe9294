package bucket

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is S3's limit on a key's length in bytes.
const MaxKeyLen = 1024

// ValidateKey rejects keys that S3 stores would mangle or refuse: empty,
// over 1024 bytes, invalid UTF-8, control characters, a leading slash, an
// empty segment ("a//b"), or a "." / ".." segment (which some stores and
// path-style proxies normalise away, silently aliasing two keys).
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("invalid key: empty")
	case len(key) > MaxKeyLen:
		return fmt.Errorf("invalid key %.40q...: %d bytes, limit %d", key, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("invalid key %q: not UTF-8", key)
	case strings.HasPrefix(key, "/"):
		return fmt.Errorf("invalid key %q: leading slash", key)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("invalid key %q: control character", key)
		}
	}
	for i, seg := range strings.Split(key, "/") {
		last := i == strings.Count(key, "/")
		if (seg == "" && !last) || seg == "." || seg == ".." {
			return fmt.Errorf("invalid key %q: empty, '.' or '..' segment", key)
		}
	}
	return nil
}

// Location is a parsed s3://BUCKET[/PREFIX], gs://BUCKET[/PREFIX] or
// az://CONTAINER[/PREFIX] URL.
type Location struct {
	// Scheme is "" for S3 (s3://), "gs" for Google Cloud Storage, "az"
	// for an Azure Blob Storage container.
	Scheme string
	Bucket string
	Prefix string // without leading or trailing slash; "" for the whole bucket
}

// ParseURL parses s3://BUCKET[/PREFIX], gs://BUCKET[/PREFIX] and
// az://CONTAINER[/PREFIX].
func ParseURL(raw string) (Location, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Location{}, fmt.Errorf("parse bucket url %q: %w", raw, err)
	}
	known := u.Scheme == "s3" || u.Scheme == "gs" || u.Scheme == "az"
	if !known || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return Location{}, fmt.Errorf("parse bucket url %q: want s3://BUCKET[/PREFIX], gs://BUCKET[/PREFIX] or az://CONTAINER[/PREFIX]", raw)
	}
	loc := Location{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
	if u.Scheme != "s3" {
		loc.Scheme = u.Scheme
	}
	if loc.Prefix != "" {
		if err := ValidateKey(loc.Prefix + "/x"); err != nil {
			return Location{}, fmt.Errorf("parse bucket url %q: prefix: %w", raw, err)
		}
	}
	return loc, nil
}

func (l Location) String() string {
	scheme := l.Scheme
	if scheme == "" {
		scheme = "s3"
	}
	if l.Prefix == "" {
		return scheme + "://" + l.Bucket
	}
	return scheme + "://" + l.Bucket + "/" + l.Prefix
}

// WithPrefix scopes b to keys under prefix: every key passed in gets
// "prefix/" in front, and every key coming out of List has it removed. It is
// how one bucket holds several independent deed deployments, and how the
// probe works in a scratch prefix without touching anything else.
func WithPrefix(b Bucket, prefix string) Bucket {
	prefix = strings.Trim(prefix, "/")
	if prefix == "" {
		return b
	}
	if p, ok := b.(*prefixed); ok {
		return &prefixed{b: p.b, p: p.p + prefix + "/"}
	}
	return &prefixed{b: b, p: prefix + "/"}
}

type prefixed struct {
	b Bucket
	p string
}

func (p *prefixed) Get(ctx context.Context, key string, max int64) (Object, error) {
	o, err := p.b.Get(ctx, p.p+key, max)
	o.Key = strings.TrimPrefix(o.Key, p.p)
	return o, p.strip(err)
}

func (p *prefixed) Head(ctx context.Context, key string) (Info, error) {
	i, err := p.b.Head(ctx, p.p+key)
	i.Key = strings.TrimPrefix(i.Key, p.p)
	return i, p.strip(err)
}

func (p *prefixed) Put(ctx context.Context, key string, body []byte, cond Condition) (string, error) {
	etag, err := p.b.Put(ctx, p.p+key, body, cond)
	return etag, p.strip(err)
}

func (p *prefixed) Delete(ctx context.Context, key string, cond Condition) error {
	return p.strip(p.b.Delete(ctx, p.p+key, cond))
}

func (p *prefixed) List(ctx context.Context, in ListInput) (ListPage, error) {
	in.Prefix = p.p + in.Prefix
	if in.StartAfter != "" {
		in.StartAfter = p.p + in.StartAfter
	}
	page, err := p.b.List(ctx, in)
	for i := range page.Objects {
		page.Objects[i].Key = strings.TrimPrefix(page.Objects[i].Key, p.p)
	}
	for i := range page.Prefixes {
		page.Prefixes[i] = strings.TrimPrefix(page.Prefixes[i], p.p)
	}
	return page, p.strip(err)
}

// strip reports keys in errors relative to the prefix, as the caller knows them.
func (p *prefixed) strip(err error) error {
	if oe, ok := err.(*OpError); ok {
		c := *oe
		c.Key = strings.TrimPrefix(c.Key, p.p)
		return &c
	}
	return err
}
