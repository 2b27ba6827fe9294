package bucket_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/storetest"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/fakes3/s3test"
)

// TestMain stops the versitygw process s3test may have started.
func TestMain(m *testing.M) { s3test.Main(m) }

// dialect is how a store is documented to answer where stores differ. Every
// field names the quirks-table row it comes from, so a deviation is asserted,
// never skipped.
type dialect struct {
	// deleteMissing is what Delete with If-Match on a missing key returns:
	// ErrNotFound, or nil on stores with bucket.QuirkDeleteMissingOK.
	deleteMissing error
	// nested is what a put of x/y returns when x exists, and of x when x/y
	// exists: nil, or ErrUnsupported on stores with
	// bucket.QuirkParentIsFile and bucket.QuirkObjectIsDirectory.
	nested error
	// deleteIgnoresMatch: a Delete with a stale If-Match deletes anyway
	// (bucket.QuirkDeleteIgnoresMatch); asserted, so a fixed store fails
	// the test until its dialect is updated.
	deleteIgnoresMatch bool
	// delimiterPageOverflow: a paged listing with a delimiter returns every
	// common prefix on each page, past MaxKeys and repeated
	// (bucket.QuirkDelimiterPaging); asserted like deleteIgnoresMatch.
	delimiterPageOverflow bool
}

var dialects = map[string]dialect{
	"mem":       {deleteMissing: bucket.ErrNotFound},
	"httpfake":  {deleteMissing: bucket.ErrNotFound},
	"httpbolt":  {deleteMissing: bucket.ErrNotFound},
	"versitygw": {deleteMissing: nil, nested: bucket.ErrUnsupported},
	"fakegcs":   {deleteMissing: bucket.ErrNotFound, deleteIgnoresMatch: true, delimiterPageOverflow: true},
	"azurite":   {deleteMissing: bucket.ErrNotFound},
}

type contractStore struct {
	name string
	b    bucket.Bucket
	d    dialect
}

// contractStores is the in-memory fake, the HTTP fake through the SDK (on
// gofakes3's in-memory backend and, as "httpbolt", on its bbolt backend),
// versitygw when DEED_VERSITYGW is set, and fake-gcs-server and Azurite
// when DEED_FAKEGCS and DEED_AZURITE are (bucket/storetest).
func contractStores(t *testing.T) []contractStore {
	t.Helper()
	out := []contractStore{{name: "mem", b: fakes3.NewMem()}}
	for _, tg := range s3test.Targets(t) {
		out = append(out, contractStore{name: tg.Name, b: tg.Bucket})
	}
	bolt := s3test.HTTPFakeWith(t, fakes3.ServerOptions{Dir: t.TempDir()})
	out = append(out, contractStore{name: "httpbolt", b: bolt.Bucket})
	for _, tg := range storetest.Targets(t) {
		out = append(out, contractStore{name: tg.Name, b: tg.Bucket})
	}
	for i := range out {
		d, ok := dialects[out[i].name]
		if !ok {
			t.Fatalf("no dialect documented for store %q", out[i].name)
		}
		out[i].d = d
	}
	return out
}

var contractCases = []struct {
	name string
	run  func(t *testing.T, d dialect, b bucket.Bucket)
}{
	{"create", testCreate},
	{"update", testUpdate},
	{"if-match-missing", testIfMatchMissing},
	{"etag-quoting", testETagQuoting},
	{"conditional-delete", testConditionalDelete},
	{"etag-equality", testETagEquality},
	{"missing", testMissing},
	{"list", testList},
	{"with-prefix", testWithPrefix},
	{"nested-keys", testNestedKeys},
	{"create-race", testCreateRace},
	{"update-race", testUpdateRace},
	{"get-limit", testGetLimit},
}

// TestContract runs the same table against every store. Each case works in
// a prefix of its own, so the cases run in parallel on one bucket.
func TestContract(t *testing.T) {
	for _, s := range contractStores(t) {
		t.Run(s.name, func(t *testing.T) {
			for _, c := range contractCases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, s.d, bucket.WithPrefix(s.b, "contract/"+c.name))
				})
			}
		})
	}
}

func mustPut(t *testing.T, b bucket.Bucket, key, body string, cond bucket.Condition) string {
	t.Helper()
	etag, err := b.Put(t.Context(), key, []byte(body), cond)
	if err != nil {
		t.Fatalf("put %s (%v): %v", key, cond, err)
	}
	if etag == "" {
		t.Fatalf("put %s (%v): empty etag", key, cond)
	}
	return etag
}

// wantBody checks key holds body with an ETag the same as etag.
func wantBody(t *testing.T, b bucket.Bucket, key, body, etag string) {
	t.Helper()
	o, err := b.Get(t.Context(), key, 0)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if string(o.Body) != body || !bucket.SameETag(o.ETag, etag) {
		t.Fatalf("get %s = %q etag %s, want %q etag %s", key, o.Body, o.ETag, body, etag)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("%s: %v, want success", what, err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
	var oe *bucket.OpError
	if !errors.As(err, &oe) {
		t.Fatalf("%s: %T is not a *bucket.OpError", what, err)
	}
}

func testCreate(t *testing.T, _ dialect, b bucket.Bucket) {
	etag := mustPut(t, b, "own.json", "first", bucket.IfAbsent)
	wantBody(t, b, "own.json", "first", etag)

	_, err := b.Put(t.Context(), "own.json", []byte("second"), bucket.IfAbsent)
	wantErr(t, "rejected create", err, bucket.ErrPrecondition)
	wantBody(t, b, "own.json", "first", etag)
}

func testUpdate(t *testing.T, _ dialect, b bucket.Bucket) {
	e1 := mustPut(t, b, "k", "v1", bucket.IfAbsent)
	e2 := mustPut(t, b, "k", "v2", bucket.IfMatch(e1))
	if bucket.SameETag(e1, e2) {
		t.Fatalf("etag did not change: %s", e2)
	}
	wantBody(t, b, "k", "v2", e2)

	_, err := b.Put(t.Context(), "k", []byte("v3"), bucket.IfMatch(e1))
	wantErr(t, "update with a stale etag", err, bucket.ErrPrecondition)
	wantBody(t, b, "k", "v2", e2)

	// An unconditional put always lands.
	e4 := mustPut(t, b, "k", "v4", bucket.None)
	wantBody(t, b, "k", "v4", e4)
}

// testIfMatchMissing: AWS answers 404, gofakes3 412; both must read as
// ErrPrecondition for a put (bucket.QuirkIfMatchMissing404), and nothing
// may be created.
func testIfMatchMissing(t *testing.T, _ dialect, b bucket.Bucket) {
	other := mustPut(t, b, "other", "x", bucket.IfAbsent)
	_, err := b.Put(t.Context(), "missing", []byte("y"), bucket.IfMatch(other))
	wantErr(t, "if-match on a missing key", err, bucket.ErrPrecondition)
	if _, err := b.Head(t.Context(), "missing"); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("head after refused if-match: %v, want not found", err)
	}
}

// testETagQuoting: the ETag is sent exactly as returned, and every store
// under test also accepts it bare (bucket.QuirkETagQuoting).
func testETagQuoting(t *testing.T, _ dialect, b bucket.Bucket) {
	e1 := mustPut(t, b, "k", "v1", bucket.IfAbsent)
	e2 := mustPut(t, b, "k", "v2", bucket.IfMatch(e1))
	bare := bucket.UnquoteETag(e2)
	if bare == e2 {
		t.Logf("store returns unquoted etags: %s", e2)
	}
	e3 := mustPut(t, b, "k", "v3", bucket.IfMatch(bare))
	wantBody(t, b, "k", "v3", e3)
	_, err := b.Put(t.Context(), "k", []byte("v4"), bucket.IfMatch(bare))
	wantErr(t, "stale bare etag", err, bucket.ErrPrecondition)
}

func testConditionalDelete(t *testing.T, d dialect, b bucket.Bucket) {
	e1 := mustPut(t, b, "k", "v1", bucket.IfAbsent)
	e2 := mustPut(t, b, "k", "v2", bucket.IfMatch(e1))

	err := b.Delete(t.Context(), "k", bucket.IfMatch(e1))
	if d.deleteIgnoresMatch {
		if err != nil {
			t.Fatalf("delete with a stale etag: %v; the store documented to ignore the condition honoured it: update its dialect", err)
		}
		if _, err := b.Head(t.Context(), "k"); !errors.Is(err, bucket.ErrNotFound) {
			t.Fatalf("head after a stale delete: %v, want not found (bucket.QuirkDeleteIgnoresMatch)", err)
		}
		e2 = mustPut(t, b, "k", "v2", bucket.IfAbsent)
	} else {
		wantErr(t, "delete with a stale etag", err, bucket.ErrPrecondition)
	}
	wantBody(t, b, "k", "v2", e2)

	if err := b.Delete(t.Context(), "k", bucket.IfMatch(e2)); err != nil {
		t.Fatalf("delete with the current etag: %v", err)
	}
	if _, err := b.Get(t.Context(), "k", 0); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("get after delete: %v, want not found", err)
	}

	err = b.Delete(t.Context(), "k", bucket.IfMatch(e2))
	wantErr(t, "conditional delete of a missing key", err, d.deleteMissing)

	if err := b.Delete(t.Context(), "never", bucket.None); err != nil {
		t.Fatalf("unconditional delete of a missing key: %v", err)
	}
}

func testETagEquality(t *testing.T, _ dialect, b bucket.Bucket) {
	for _, body := range []string{"", "small", string(make([]byte, 70_000))} {
		key := fmt.Sprintf("obj-%d", len(body))
		put := mustPut(t, b, key, body, bucket.IfAbsent)
		o, err := b.Get(t.Context(), key, 0)
		if err != nil {
			t.Fatal(err)
		}
		h, err := b.Head(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if h.Size != int64(len(body)) || string(o.Body) != body {
			t.Fatalf("%s: size %d / body %d bytes, want %d", key, h.Size, len(o.Body), len(body))
		}
		page, err := b.List(t.Context(), bucket.ListInput{Prefix: key})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Objects) != 1 || page.Objects[0].Key != key {
			t.Fatalf("list %s = %+v", key, page)
		}
		for what, etag := range map[string]string{"get": o.ETag, "head": h.ETag, "list": page.Objects[0].ETag} {
			if !bucket.SameETag(put, etag) {
				t.Errorf("%s: %s etag %s != put etag %s", key, what, etag, put)
			}
		}
	}
}

func testMissing(t *testing.T, _ dialect, b bucket.Bucket) {
	_, err := b.Get(t.Context(), "nope", 0)
	wantErr(t, "get missing", err, bucket.ErrNotFound)
	_, err = b.Head(t.Context(), "nope")
	wantErr(t, "head missing", err, bucket.ErrNotFound)
	page, err := b.List(t.Context(), bucket.ListInput{Prefix: "nope/"})
	if err != nil || len(page.Objects)+len(page.Prefixes) != 0 || page.NextToken != "" {
		t.Fatalf("list of an empty prefix = %+v, %v", page, err)
	}
}

// listKeys avoids a key that is also a "directory" of another key (x and
// x/y): versitygw's posix backend cannot hold both (testNestedKeys), and
// deed's layout never needs it.
var listKeys = []string{
	"l/a/1", "l/a/2", "l/a/3", "l/b", "l/c/1", "l/d", "l/e/x/1", "l/e/x/2", "l/f",
}

func testList(t *testing.T, d dialect, b bucket.Bucket) {
	for _, k := range listKeys {
		mustPut(t, b, k, k, bucket.IfAbsent)
	}
	mustPut(t, b, "outside", "x", bucket.IfAbsent)

	cases := []struct {
		name             string
		in               bucket.ListInput
		objects, prefixs []string
	}{
		{"flat", bucket.ListInput{Prefix: "l/"}, listKeys, nil},
		{"delimiter", bucket.ListInput{Prefix: "l/", Delimiter: "/"},
			[]string{"l/b", "l/d", "l/f"}, []string{"l/a/", "l/c/", "l/e/"}},
		{"nested prefix", bucket.ListInput{Prefix: "l/e/", Delimiter: "/"}, nil, []string{"l/e/x/"}},
		{"start-after flat", bucket.ListInput{Prefix: "l/", StartAfter: "l/c/1"},
			[]string{"l/d", "l/e/x/1", "l/e/x/2", "l/f"}, nil},
		{"start-after delimiter", bucket.ListInput{Prefix: "l/", Delimiter: "/", StartAfter: "l/c/1"},
			[]string{"l/d", "l/f"}, []string{"l/e/"}},
	}
	for _, c := range cases {
		for _, max := range []int{0, 1, 2, 3} {
			in := c.in
			in.MaxKeys = max
			// bucket.QuirkDelimiterPaging: pages may overflow and repeat
			// prefixes; the listing as a whole must still be right.
			overflow := d.delimiterPageOverflow && in.Delimiter != "" && max > 0
			var objs, prefixes []string
			for pages := 0; ; pages++ {
				if pages > 20 {
					t.Fatalf("%s max %d: listing does not end", c.name, max)
				}
				page, err := b.List(t.Context(), in)
				if err != nil {
					t.Fatalf("%s max %d: %v", c.name, max, err)
				}
				if n := len(page.Objects) + len(page.Prefixes); max > 0 && n > max && !overflow {
					t.Fatalf("%s max %d: page of %d entries", c.name, max, n)
				}
				for _, o := range page.Objects {
					objs = append(objs, o.Key)
					if o.ETag == "" {
						t.Errorf("%s: %s listed without an etag", c.name, o.Key)
					}
				}
				prefixes = append(prefixes, page.Prefixes...)
				if page.NextToken == "" {
					break
				}
				in.Token = page.NextToken
			}
			if overflow {
				slices.Sort(prefixes)
				prefixes = slices.Compact(prefixes)
			}
			if !slices.Equal(objs, c.objects) || !slices.Equal(prefixes, c.prefixs) {
				t.Errorf("%s max %d: objects %q prefixes %q, want %q %q", c.name, max, objs, prefixes, c.objects, c.prefixs)
			}
		}
	}

	if d.delimiterPageOverflow {
		page, err := b.List(t.Context(), bucket.ListInput{Prefix: "l/", Delimiter: "/", MaxKeys: 1})
		if err != nil || len(page.Objects)+len(page.Prefixes) <= 1 {
			t.Errorf("delimiter max 1: page of %d entries, %v; the store documented to overflow did not: update its dialect",
				len(page.Objects)+len(page.Prefixes), err)
		}
	}

	all, err := bucket.ListAll(t.Context(), b, bucket.ListInput{Prefix: "l/", MaxKeys: 2})
	if err != nil || len(all.Objects) != len(listKeys) {
		t.Fatalf("ListAll = %d objects, %v; want %d", len(all.Objects), err, len(listKeys))
	}
}

func testWithPrefix(t *testing.T, _ dialect, b bucket.Bucket) {
	scoped := bucket.WithPrefix(b, "tenant")
	nested := bucket.WithPrefix(scoped, "/inner/")
	mustPut(t, scoped, "k", "scoped", bucket.IfAbsent)
	mustPut(t, nested, "k", "nested", bucket.IfAbsent)
	mustPut(t, b, "tenantx/k", "neighbour", bucket.IfAbsent)

	o, err := b.Get(t.Context(), "tenant/inner/k", 0)
	if err != nil || string(o.Body) != "nested" {
		t.Fatalf("get through the parent = %q, %v", o.Body, err)
	}
	if o, err := scoped.Get(t.Context(), "k", 0); err != nil || o.Key != "k" || string(o.Body) != "scoped" {
		t.Fatalf("scoped get = %+v, %v", o, err)
	}
	if i, err := nested.Head(t.Context(), "k"); err != nil || i.Key != "k" {
		t.Fatalf("nested head = %+v, %v", i, err)
	}

	page, err := bucket.ListAll(t.Context(), scoped, bucket.ListInput{Delimiter: "/"})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range page.Objects {
		keys = append(keys, o.Key)
	}
	if !slices.Equal(keys, []string{"k"}) || !slices.Equal(page.Prefixes, []string{"inner/"}) {
		t.Fatalf("scoped list = %q %q, want [k] [inner/] and nothing of tenantx/", keys, page.Prefixes)
	}
	page, err = scoped.List(t.Context(), bucket.ListInput{StartAfter: "inner/k"})
	if err != nil || len(page.Objects) != 1 || page.Objects[0].Key != "k" {
		t.Fatalf("scoped list after inner/k = %+v, %v", page, err)
	}

	_, err = nested.Get(t.Context(), "missing", 0)
	var oe *bucket.OpError
	if !errors.As(err, &oe) || oe.Key != "missing" || !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("scoped error = %v, want not found naming the scoped key", err)
	}
}

const raceWidth, raceRounds = 50, 5

// race runs n concurrent puts of key, each with its own body, and checks
// exactly one wins and every other one is refused with ErrPrecondition.
func race(t *testing.T, b bucket.Bucket, key string, cond bucket.Condition) {
	t.Helper()
	ctx := t.Context()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, raceWidth)
		etags = make([]string, raceWidth)
	)
	for i := range raceWidth {
		wg.Go(func() {
			<-start
			etags[i], errs[i] = b.Put(ctx, key, fmt.Appendf(nil, "racer %d", i), cond)
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("%s: racers %d and %d both won", key, winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, bucket.ErrPrecondition):
			t.Errorf("%s: racer %d: %v, want precondition failed", key, i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("%s: no racer won", key)
	}
	wantBody(t, b, key, fmt.Sprintf("racer %d", winner), etags[winner])
}

func testCreateRace(t *testing.T, _ dialect, b bucket.Bucket) {
	for round := range raceRounds {
		race(t, b, fmt.Sprintf("race-%d", round), bucket.IfAbsent)
	}
}

func testUpdateRace(t *testing.T, _ dialect, b bucket.Bucket) {
	for round := range raceRounds {
		key := fmt.Sprintf("race-%d", round)
		etag := mustPut(t, b, key, "base", bucket.IfAbsent)
		race(t, b, key, bucket.IfMatch(etag))
	}
}

// testNestedKeys: a key below another key, and a key above others. S3
// allows both; a posix-backed store refuses them for good, which must not
// read as a race to retry.
func testNestedKeys(t *testing.T, d dialect, b bucket.Bucket) {
	xTag := mustPut(t, b, "x", "file", bucket.IfAbsent)
	_, err := b.Put(t.Context(), "x/y", []byte("below"), bucket.IfAbsent)
	wantErr(t, "put below an existing key", err, d.nested)
	_, err = b.Put(t.Context(), "x/z", []byte("below"), bucket.None)
	wantErr(t, "plain put below an existing key", err, d.nested)

	mustPut(t, b, "d/e", "below", bucket.IfAbsent)
	_, err = b.Put(t.Context(), "d", []byte("above"), bucket.IfAbsent)
	wantErr(t, "put above an existing key", err, d.nested)

	wantBody(t, b, "x", "file", xTag)
	if d.nested == nil {
		if o, err := b.Get(t.Context(), "x/y", 0); err != nil || string(o.Body) != "below" {
			t.Fatalf("get x/y = %q, %v", o.Body, err)
		}
	}
}
