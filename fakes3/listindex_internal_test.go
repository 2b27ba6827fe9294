package fakes3

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// scanCounter counts the keys a LIST walks in the backend. gofakes3's
// backends walk from the bucket's first key to its last on every
// ListBucket, whatever the prefix, so that is what it counts.
type scanCounter struct {
	gofakes3.Backend
	walked atomic.Int64
}

func (c *scanCounter) ListBucket(name string, prefix *gofakes3.Prefix, page gofakes3.ListBucketPage) (*gofakes3.ObjectList, error) {
	all, err := c.Backend.ListBucket(name, nil, gofakes3.ListBucketPage{})
	if err != nil {
		return nil, err
	}
	c.walked.Add(int64(len(all.Contents)))
	return c.Backend.ListBucket(name, prefix, page)
}

type listResult struct {
	Keys        []string `xml:"Contents>Key"`
	Prefixes    []string `xml:"CommonPrefixes>Prefix"`
	IsTruncated bool
	NextToken   string `xml:"NextContinuationToken"`
}

// listKeys sends one ListObjectsV2 request (the server checks no
// signatures here) and decodes its answer.
func listKeys(t *testing.T, url, query string) listResult {
	t.Helper()
	resp, err := http.Get(url + "/b?list-type=2&" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("LIST %s: %d %s", query, resp.StatusCode, body)
	}
	var out listResult
	if err := xml.Unmarshal(body, &out); err != nil {
		t.Fatalf("LIST %s: %v\n%s", query, err, body)
	}
	return out
}

// serveWrapped serves an in-memory server with bucket "b" whose backend
// wrap wraps, and returns its URL.
func serveWrapped(t *testing.T, wrap func(gofakes3.Backend) gofakes3.Backend) string {
	t.Helper()
	srv, err := NewServer(ServerOptions{Buckets: []string{"b"}, wrapBackend: wrap})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	t.Cleanup(func() { _ = srv.Close() })
	return hs.URL
}

// A LIST under a narrow prefix costs what it returns, not what the bucket
// holds: with 5,000 keys elsewhere in the bucket, listing a cell's three
// keys walks none of them. (The server used to hand every LIST to
// gofakes3's backend, which walks the whole bucket: 5,003 keys here.)
func TestListWalksOnlyItsPrefix(t *testing.T) {
	counter := &scanCounter{}
	url := serveWrapped(t, func(b gofakes3.Backend) gofakes3.Backend {
		counter.Backend = b
		if err := b.CreateBucket("b"); err != nil {
			t.Fatal(err)
		}
		put := func(key string) {
			if _, err := b.PutObject("b", key, map[string]string{}, bytes.NewReader([]byte(key)), int64(len(key)), nil); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 5000 {
			put(fmt.Sprintf("cells/other-%05d/own.json", i))
		}
		for i := range 3 {
			put(fmt.Sprintf("cells/c/ltx/e1/%016x.ltx", i+1))
		}
		return counter
	})
	counter.walked.Store(0)
	got := listKeys(t, url, "prefix=cells/c/")
	if len(got.Keys) != 3 {
		t.Fatalf("listed %v, want the cell's 3 keys", got.Keys)
	}
	if n := counter.walked.Load(); n > 3 {
		t.Fatalf("a LIST of 3 keys walked %d keys of the backend", n)
	}
}

// The index follows every kind of write, and listing from it pages like S3:
// a brute-force model of the keys agrees with paged listings, with and
// without a delimiter, after puts, deletes, a multi-delete and a copy.
func TestListFollowsWrites(t *testing.T) {
	url := serveWrapped(t, func(b gofakes3.Backend) gofakes3.Backend {
		if _, isMem := b.(*s3mem.Backend); !isMem {
			t.Fatalf("in-memory server on %T", b)
		}
		return b
	})
	send := func(method, path string, body []byte, hdr map[string]string) {
		t.Helper()
		req, err := http.NewRequest(method, url+"/b/"+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out)
		}
	}
	model := map[string]bool{}
	for _, k := range []string{"a", "l/a/1", "l/a/2", "l/b", "l/c/1", "l/c/2", "l/c/3", "l/d", "l/e/x/1", "m/1"} {
		send("PUT", k, []byte(k), nil)
		model[k] = true
	}
	send("DELETE", "l/b", nil, nil)
	delete(model, "l/b")
	send("POST", "?delete", []byte(`<Delete><Object><Key>l/c/2</Key></Object><Object><Key>m/1</Key></Object></Delete>`), nil)
	delete(model, "l/c/2")
	delete(model, "m/1")
	send("PUT", "l/f", nil, map[string]string{"X-Amz-Copy-Source": "/b/l/d"})
	model["l/f"] = true

	want := func(prefix, delim string) (keys, prefixes []string) {
		seen := map[string]bool{}
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range model {
				if !yield(k) {
					return
				}
			}
		}) {
			if len(k) < len(prefix) || k[:len(prefix)] != prefix {
				continue
			}
			if i := bytes.IndexByte([]byte(k[len(prefix):]), '/'); delim != "" && i >= 0 {
				if cp := k[:len(prefix)+i+1]; !seen[cp] {
					seen[cp] = true
					prefixes = append(prefixes, cp)
				}
				continue
			}
			keys = append(keys, k)
		}
		return keys, prefixes
	}
	for _, tc := range []struct{ prefix, delim string }{{"", ""}, {"l/", ""}, {"l/", "/"}, {"", "/"}, {"l/c/", "/"}} {
		for _, max := range []int{1, 2, 3, 1000} {
			var keys, prefixes []string
			token := ""
			for pages := 0; ; pages++ {
				if pages > 20 {
					t.Fatalf("prefix %q delimiter %q max %d: does not end", tc.prefix, tc.delim, max)
				}
				q := fmt.Sprintf("prefix=%s&delimiter=%s&max-keys=%d", tc.prefix, tc.delim, max)
				if token != "" {
					q += "&continuation-token=" + token
				}
				page := listKeys(t, url, q)
				if n := len(page.Keys) + len(page.Prefixes); n > max {
					t.Fatalf("%s: %d entries on a page", q, n)
				}
				keys, prefixes = append(keys, page.Keys...), append(prefixes, page.Prefixes...)
				if !page.IsTruncated {
					break
				}
				token = page.NextToken
			}
			wk, wp := want(tc.prefix, tc.delim)
			if !slices.Equal(keys, wk) || !slices.Equal(prefixes, wp) {
				t.Errorf("prefix %q delimiter %q max %d: keys %v prefixes %v, want %v %v", tc.prefix, tc.delim, max, keys, prefixes, wk, wp)
			}
		}
	}
}
