// Package fakes3 holds deed's two fake object stores.
//
// Mem is an in-memory implementation of bucket.Bucket with scriptable faults:
// no sockets, safe for concurrent use, and usable inside testing/synctest
// bubbles (latency is a time.Sleep, which virtual time advances). The
// protocol's fault tests and the simulation run on it.
//
// Server is an HTTP S3 endpoint built on gofakes3, for tests that must go
// through aws-sdk-go-v2, and for `deed fakes3` and the daemon's embedded store.
package fakes3

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deedkit/deed/bucket"
)

// Op names a request kind, as counted and as matched by fault rules.
type Op string

// The request kinds.
const (
	OpGet    Op = "GET"
	OpHead   Op = "HEAD"
	OpPut    Op = "PUT"
	OpDelete Op = "DELETE"
	OpList   Op = "LIST"
)

// Fault is what a matching rule does to a request.
type Fault int

const (
	// NoFault only adds the rule's latency.
	NoFault Fault = iota
	// ErrBefore fails the request with a 500 before it applies.
	ErrBefore
	// ErrAfter applies the request, then fails it with a 500: the lost
	// response. A conditional write that hits it is ambiguous to the caller
	// although it landed.
	ErrAfter
	// Conflict answers 409 ConditionalRequestConflict without applying.
	Conflict
	// SlowDown answers 503 SlowDown without applying.
	SlowDown
	// Drop never answers: the request blocks until its context ends, without
	// applying (a hung connection).
	Drop
)

var faultNames = [...]string{"none", "error-before", "error-after", "409", "503", "drop"}

func (f Fault) String() string {
	if f < 0 || int(f) >= len(faultNames) {
		return "fault(" + strconv.Itoa(int(f)) + ")"
	}
	return faultNames[f]
}

// Rule scripts a fault. Empty match fields match everything.
type Rule struct {
	Op        Op     // "" = every kind
	Key       string // exact key; "" = any
	KeyPrefix string // key prefix; "" = any
	Client    string // client name (see Mem.Client); "" = any
	// Match, when set, must also return true. Calls to Match are
	// serialised (one at a time across all requests, so it may keep state
	// without locking), but they run without the lock that guards the
	// objects: Match may read the store with Bytes, Keys or Counts to fault
	// a request only in some state. It must not send requests through the
	// Mem.
	Match func(op Op, key string) bool

	Latency time.Duration // added before the request is served
	Fault   Fault

	// Skip lets the first Skip matching requests through untouched.
	Skip int
	// Times bounds how many requests the rule hits; 0 means unlimited.
	Times int

	hits int
}

// Counts is the number of requests served, by kind.
type Counts struct {
	Get, Head, Put, Delete, List int64
}

// Total is the sum over all kinds.
func (c Counts) Total() int64 { return c.Get + c.Head + c.Put + c.Delete + c.List }

// Sub returns c − o, for measuring one phase of a test.
func (c Counts) Sub(o Counts) Counts {
	return Counts{c.Get - o.Get, c.Head - o.Head, c.Put - o.Put, c.Delete - o.Delete, c.List - o.List}
}

func (c Counts) String() string {
	return fmt.Sprintf("GET %d HEAD %d PUT %d DELETE %d LIST %d", c.Get, c.Head, c.Put, c.Delete, c.List)
}

type memObj struct {
	body []byte
	etag string
	mod  time.Time
}

// Mem is an in-memory bucket. Its zero value is not usable; call NewMem.
// Mem itself is the client named ""; Client gives named views that share
// the same objects, so a test can partition or slow down one node.
type Mem struct {
	matchMu     sync.Mutex // serialises Rule.Match calls; never held with mu
	mu          sync.Mutex
	objs        map[string]memObj
	keys        keyIndex // the keys of objs in order, for LIST
	rules       []*Rule
	counts      Counts
	partitioned map[string]bool
	// IgnoreConditions makes every write unconditional, like a store that
	// accepts the headers and ignores them (for testing the probe).
	ignoreConditions bool
}

// NewMem returns an empty in-memory bucket.
func NewMem() *Mem {
	return &Mem{objs: map[string]memObj{}, partitioned: map[string]bool{}}
}

// SetIgnoreConditions turns the broken-store mode on or off.
func (m *Mem) SetIgnoreConditions(on bool) {
	m.mu.Lock()
	m.ignoreConditions = on
	m.mu.Unlock()
}

// Inject adds a fault rule and returns a function that removes it.
func (m *Mem) Inject(r Rule) (remove func()) {
	rp := &r
	m.mu.Lock()
	m.rules = append(m.rules, rp)
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		for i, x := range m.rules {
			if x == rp {
				m.rules = append(m.rules[:i], m.rules[i+1:]...)
				return
			}
		}
	}
}

// ClearFaults removes every rule and heals every partition.
func (m *Mem) ClearFaults() {
	m.mu.Lock()
	m.rules = nil
	m.partitioned = map[string]bool{}
	m.mu.Unlock()
}

// Partition cuts (on=true) or heals a named client: its requests fail with a
// network error before reaching the store.
func (m *Mem) Partition(client string, on bool) {
	m.mu.Lock()
	m.partitioned[client] = on
	m.mu.Unlock()
}

// Counts returns the requests served so far (including failed ones).
func (m *Mem) Counts() Counts {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts
}

// Client returns a view of the same bucket whose requests carry name, so
// rules and partitions can single it out.
func (m *Mem) Client(name string) bucket.Bucket { return &memClient{m: m, name: name} }

// Bytes returns a copy of the object's body, bypassing faults and counters.
func (m *Mem) Bytes(key string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[key]
	return append([]byte(nil), o.body...), ok
}

// Set writes an object directly, bypassing faults, counters and conditions
// (for planting corrupt files in tests).
func (m *Mem) Set(key string, body []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.store(key, memObj{body: append([]byte(nil), body...), etag: etagOf(body), mod: time.Now()})
}

// store sets objs[key] and keeps the key index in step; m.mu must be held.
func (m *Mem) store(key string, o memObj) {
	if _, ok := m.objs[key]; !ok {
		m.keys.insert(key)
	}
	m.objs[key] = o
}

// remove deletes objs[key] and keeps the key index in step; m.mu must be held.
func (m *Mem) remove(key string) {
	if _, ok := m.objs[key]; !ok {
		return
	}
	delete(m.objs, key)
	m.keys.remove(key)
}

// Keys lists every key under prefix, sorted, bypassing faults and counters.
func (m *Mem) Keys(prefix string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	m.keys.ascend(prefix, func(k string) bool {
		if !strings.HasPrefix(k, prefix) {
			return false
		}
		keys = append(keys, k)
		return true
	})
	return keys
}

func (m *Mem) Get(ctx context.Context, key string, max int64) (bucket.Object, error) {
	return m.get(ctx, "", key, max)
}
func (m *Mem) Head(ctx context.Context, key string) (bucket.Info, error) {
	return m.head(ctx, "", key)
}
func (m *Mem) Put(ctx context.Context, key string, body []byte, c bucket.Condition) (string, error) {
	return m.put(ctx, "", key, body, c)
}
func (m *Mem) Delete(ctx context.Context, key string, c bucket.Condition) error {
	return m.del(ctx, "", key, c)
}
func (m *Mem) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	return m.list(ctx, "", in)
}

type memClient struct {
	m    *Mem
	name string
}

func (c *memClient) Get(ctx context.Context, key string, max int64) (bucket.Object, error) {
	return c.m.get(ctx, c.name, key, max)
}
func (c *memClient) Head(ctx context.Context, key string) (bucket.Info, error) {
	return c.m.head(ctx, c.name, key)
}
func (c *memClient) Put(ctx context.Context, key string, body []byte, cond bucket.Condition) (string, error) {
	return c.m.put(ctx, c.name, key, body, cond)
}
func (c *memClient) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	return c.m.del(ctx, c.name, key, cond)
}
func (c *memClient) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	return c.m.list(ctx, c.name, in)
}

func etagOf(body []byte) string {
	sum := md5.Sum(body)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

var errNetwork = errors.New("connection reset by peer (injected)")

// plan is what the rules decided for one request.
type plan struct {
	latency time.Duration
	fault   Fault
}

// begin counts the request, picks the faults that apply and sleeps the
// latency. A non-nil error means the request must fail without applying.
func (m *Mem) begin(ctx context.Context, client string, op Op, key string, cond bucket.Condition) (plan, error) {
	// Match functions are test code that may read the store, so they run
	// on a snapshot of the rules, under matchMu rather than mu.
	m.mu.Lock()
	rules := slices.Clone(m.rules)
	m.mu.Unlock()
	matched := rules[:0]
	m.matchMu.Lock()
	for _, r := range rules {
		if r.matches(client, op, key) {
			matched = append(matched, r)
		}
	}
	m.matchMu.Unlock()

	m.mu.Lock()
	switch op {
	case OpGet:
		m.counts.Get++
	case OpHead:
		m.counts.Head++
	case OpPut:
		m.counts.Put++
	case OpDelete:
		m.counts.Delete++
	case OpList:
		m.counts.List++
	}
	var p plan
	for _, r := range matched {
		if !slices.Contains(m.rules, r) {
			continue // removed while its Match ran
		}
		r.hits++
		if r.hits <= r.Skip || (r.Times > 0 && r.hits > r.Skip+r.Times) {
			continue
		}
		p.latency += r.Latency
		if r.Fault != NoFault && p.fault == NoFault {
			p.fault = r.Fault
		}
	}
	cut := m.partitioned[client]
	m.mu.Unlock()

	opName := strings.ToLower(string(op))
	if cut {
		return p, bucket.Classify(opName, key, cond, 0, "", errNetwork)
	}
	if p.latency > 0 {
		t := time.NewTimer(p.latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return p, bucket.Classify(opName, key, cond, 0, "", ctx.Err())
		}
	}
	if err := ctx.Err(); err != nil {
		return p, bucket.Classify(opName, key, cond, 0, "", err)
	}
	switch p.fault {
	case ErrBefore:
		return p, bucket.Classify(opName, key, cond, 500, "InternalError", errors.New("injected error before apply"))
	case Conflict:
		return p, bucket.Classify(opName, key, cond, 409, "ConditionalRequestConflict", errors.New("injected conflict"))
	case SlowDown:
		return p, bucket.Classify(opName, key, cond, 503, "SlowDown", errors.New("injected slow down"))
	case Drop:
		<-ctx.Done()
		return p, bucket.Classify(opName, key, cond, 0, "", ctx.Err())
	}
	return p, nil
}

// end turns a successful application into the lost response when the plan says so.
func (p plan) end(op Op, key string, cond bucket.Condition) error {
	if p.fault == ErrAfter {
		return bucket.Classify(strings.ToLower(string(op)), key, cond, 500, "InternalError", errors.New("injected error after apply"))
	}
	return nil
}

func (r *Rule) matches(client string, op Op, key string) bool {
	return (r.Op == "" || r.Op == op) &&
		(r.Key == "" || r.Key == key) &&
		(r.KeyPrefix == "" || strings.HasPrefix(key, r.KeyPrefix)) &&
		(r.Client == "" || r.Client == client) &&
		(r.Match == nil || r.Match(op, key))
}

// get copies the body out only when it fits max (max ≤ 0: any size), as
// a store's Content-Length lets the S3 adapter refuse before reading.
func (m *Mem) get(ctx context.Context, client, key string, max int64) (bucket.Object, error) {
	p, err := m.begin(ctx, client, OpGet, key, bucket.None)
	if err != nil {
		return bucket.Object{}, err
	}
	m.mu.Lock()
	o, ok := m.objs[key]
	m.mu.Unlock()
	if !ok {
		return bucket.Object{}, bucket.Classify("get", key, bucket.None, 404, "NoSuchKey", nil)
	}
	if err := p.end(OpGet, key, bucket.None); err != nil {
		return bucket.Object{}, err
	}
	if size := int64(len(o.body)); max > 0 && size > max {
		return bucket.Object{Key: key, ETag: o.etag}, bucket.TooLarge(key, size, max)
	}
	return bucket.Object{Key: key, ETag: o.etag, Body: append([]byte(nil), o.body...)}, nil
}

func (m *Mem) head(ctx context.Context, client, key string) (bucket.Info, error) {
	p, err := m.begin(ctx, client, OpHead, key, bucket.None)
	if err != nil {
		return bucket.Info{}, err
	}
	m.mu.Lock()
	o, ok := m.objs[key]
	m.mu.Unlock()
	if !ok {
		return bucket.Info{}, bucket.Classify("head", key, bucket.None, 404, "NotFound", nil)
	}
	if err := p.end(OpHead, key, bucket.None); err != nil {
		return bucket.Info{}, err
	}
	return bucket.Info{Key: key, ETag: o.etag, Size: int64(len(o.body)), LastModified: o.mod}, nil
}

func (m *Mem) put(ctx context.Context, client, key string, body []byte, cond bucket.Condition) (string, error) {
	p, err := m.begin(ctx, client, OpPut, key, cond)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	cur, exists := m.objs[key]
	if !m.ignoreConditions {
		switch cond.Kind {
		case bucket.CondIfAbsent:
			if exists {
				m.mu.Unlock()
				return "", bucket.Classify("put", key, cond, 412, "PreconditionFailed", nil)
			}
		case bucket.CondIfMatch:
			if !exists {
				// AWS answers If-Match on a missing key with 404.
				m.mu.Unlock()
				return "", bucket.Classify("put", key, cond, 404, "NoSuchKey", nil)
			}
			if !bucket.SameETag(cur.etag, cond.ETag) {
				m.mu.Unlock()
				return "", bucket.Classify("put", key, cond, 412, "PreconditionFailed", nil)
			}
		}
	}
	etag := etagOf(body)
	m.store(key, memObj{body: append([]byte(nil), body...), etag: etag, mod: time.Now()})
	m.mu.Unlock()
	if err := p.end(OpPut, key, cond); err != nil {
		return "", err
	}
	return etag, nil
}

func (m *Mem) del(ctx context.Context, client, key string, cond bucket.Condition) error {
	p, err := m.begin(ctx, client, OpDelete, key, cond)
	if err != nil {
		return err
	}
	m.mu.Lock()
	cur, exists := m.objs[key]
	if cond.Kind == bucket.CondIfMatch && !m.ignoreConditions {
		if !exists {
			m.mu.Unlock()
			return bucket.Classify("delete", key, cond, 404, "NoSuchKey", nil)
		}
		if !bucket.SameETag(cur.etag, cond.ETag) {
			m.mu.Unlock()
			return bucket.Classify("delete", key, cond, 412, "PreconditionFailed", nil)
		}
	}
	m.remove(key)
	m.mu.Unlock()
	return p.end(OpDelete, key, cond)
}

func (m *Mem) list(ctx context.Context, client string, in bucket.ListInput) (bucket.ListPage, error) {
	p, err := m.begin(ctx, client, OpList, in.Prefix, bucket.None)
	if err != nil {
		return bucket.ListPage{}, err
	}
	max := in.MaxKeys
	if max <= 0 || max > 1000 {
		max = 1000
	}
	after := in.StartAfter
	if in.Token != "" {
		after = in.Token
	}
	m.mu.Lock()
	// The keys after the token (or StartAfter) under the prefix, in order.
	from := in.Prefix
	if after >= from {
		from = after + "\x00"
	}
	var page bucket.ListPage
	n := 0
	last := ""
	lastPrefix := ""
	m.keys.ascend(from, func(k string) bool {
		if !strings.HasPrefix(k, in.Prefix) {
			return false
		}
		cp := ""
		if in.Delimiter != "" {
			if i := strings.Index(k[len(in.Prefix):], in.Delimiter); i >= 0 {
				cp = k[:len(in.Prefix)+i+len(in.Delimiter)]
			}
		}
		if cp != "" && cp == lastPrefix {
			// Still inside a common prefix already returned: skip it whole,
			// so the next page's token starts after it.
			last = k
			return true
		}
		if n == max {
			page.NextToken = last
			return false
		}
		if cp != "" {
			page.Prefixes = append(page.Prefixes, cp)
			lastPrefix = cp
		} else {
			o := m.objs[k]
			page.Objects = append(page.Objects, bucket.Info{Key: k, ETag: o.etag, Size: int64(len(o.body)), LastModified: o.mod})
		}
		n++
		last = k
		return true
	})
	m.mu.Unlock()
	if err := p.end(OpList, in.Prefix, bucket.None); err != nil {
		return bucket.ListPage{}, err
	}
	return page, nil
}

var _ bucket.Bucket = (*Mem)(nil)
