package fakes3

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/johannesboyne/gofakes3"
)

// indexedLister serves ListBucket from an ordered index of every bucket's
// keys, kept beside gofakes3's backend, and answers it the way S3 does.
//
// Why an index: both of gofakes3's backends (s3mem and s3bolt) walk a
// LIST from the bucket's first key (or the marker) to its last, testing
// each key against the prefix, however narrow the prefix and however few
// keys match. A LIST thus cost O(keys in the bucket), and a daemon that
// lists under one cell's prefix when it opens that cell's log spent time
// quadratic in its cells (the idle-cell memory benchmark slowed from
// hundreds of claims per second to a few dozen by 30,000 cells). With the
// index a LIST costs O(log n) to find its first key plus one HeadObject
// (a point lookup) per object it returns.
//
// Why it pages itself: s3mem ends a page inside a common prefix and
// returns that prefix again on the next page, and reports IsTruncated when
// only non-matching keys follow. Here a common prefix counts once, and the
// next page starts after every key it rolls up.
//
// LastModified in a listing is the object's Last-Modified header value
// (whole seconds, as HEAD and GET report it), not the backend's
// millisecond time: the index keeps only keys.
type indexedLister struct {
	gofakes3.Backend

	// wmu serialises each mutation with the index update that follows
	// it, so the index never lags behind a write that has returned.
	wmu sync.Mutex
	mu  sync.RWMutex
	idx map[string]*keyIndex // by bucket; a bucket exists iff it has an entry
}

// newIndexedLister indexes every key of every bucket b holds (a persisted
// store may hold some from an earlier run).
func newIndexedLister(b gofakes3.Backend) (*indexedLister, error) {
	x := &indexedLister{Backend: b, idx: map[string]*keyIndex{}}
	buckets, err := b.ListBuckets()
	if err != nil {
		return nil, err
	}
	for _, bi := range buckets {
		all, err := b.ListBucket(bi.Name, nil, gofakes3.ListBucketPage{})
		if err != nil {
			return nil, err
		}
		ix := &keyIndex{}
		for _, c := range all.Contents {
			if !ix.has(c.Key) {
				ix.insert(c.Key)
			}
		}
		x.idx[bi.Name] = ix
	}
	return x, nil
}

// sync makes the index agree with the backend about bucket/key.
func (x *indexedLister) sync(bucket, key string) {
	_, err := x.Backend.HeadObject(bucket, key)
	exists := err == nil
	x.mu.Lock()
	defer x.mu.Unlock()
	ix := x.idx[bucket]
	if ix == nil {
		return
	}
	switch has := ix.has(key); {
	case exists && !has:
		ix.insert(key)
	case !exists && has:
		ix.remove(key)
	}
}

// syncBucket records whether bucket exists now.
func (x *indexedLister) syncBucket(bucket string) {
	ok, err := x.Backend.BucketExists(bucket)
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case err == nil && ok && x.idx[bucket] == nil:
		x.idx[bucket] = &keyIndex{}
	case err == nil && !ok:
		delete(x.idx, bucket)
	}
}

func (x *indexedLister) PutObject(bucketName, key string, meta map[string]string, input io.Reader, size int64, cond *gofakes3.PutConditions) (gofakes3.PutObjectResult, error) {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	r, err := x.Backend.PutObject(bucketName, key, meta, input, size, cond)
	x.sync(bucketName, key)
	return r, err
}

func (x *indexedLister) DeleteObject(bucketName, key string) (gofakes3.ObjectDeleteResult, error) {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	r, err := x.Backend.DeleteObject(bucketName, key)
	x.sync(bucketName, key)
	return r, err
}

func (x *indexedLister) DeleteMulti(bucketName string, keys ...string) (gofakes3.MultiDeleteResult, error) {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	r, err := x.Backend.DeleteMulti(bucketName, keys...)
	for _, k := range keys {
		x.sync(bucketName, k)
	}
	return r, err
}

func (x *indexedLister) CopyObject(srcBucket, srcKey, dstBucket, dstKey string, meta map[string]string) (gofakes3.CopyObjectResult, error) {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	r, err := x.Backend.CopyObject(srcBucket, srcKey, dstBucket, dstKey, meta)
	x.sync(dstBucket, dstKey)
	return r, err
}

func (x *indexedLister) CreateBucket(name string) error {
	return x.bucketWrite(name, x.Backend.CreateBucket)
}

func (x *indexedLister) DeleteBucket(name string) error {
	return x.bucketWrite(name, x.Backend.DeleteBucket)
}

func (x *indexedLister) ForceDeleteBucket(name string) error {
	return x.bucketWrite(name, x.Backend.ForceDeleteBucket)
}

// bucketWrite creates or deletes bucket name with op, then records whether
// it exists.
func (x *indexedLister) bucketWrite(name string, op func(string) error) error {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	err := op(name)
	x.syncBucket(name)
	return err
}

// ListBucket lists the keys under the prefix after the marker, rolling
// keys up into common prefixes at the delimiter, at most page.MaxKeys
// entries (0: all).
func (x *indexedLister) ListBucket(name string, prefix *gofakes3.Prefix, page gofakes3.ListBucketPage) (*gofakes3.ObjectList, error) {
	var p, delim string
	if prefix != nil {
		if prefix.HasPrefix {
			p = prefix.Prefix
		}
		if prefix.HasDelimiter {
			delim = prefix.Delimiter
		}
	}
	type entry struct {
		key    string
		common bool // key is a common prefix
	}
	var (
		entries   []entry
		truncated bool
		next      string // the last key the page covers
		lastCP    string
	)
	from := p
	if page.HasMarker && page.Marker >= from {
		from = page.Marker + "\x00" // the keys after the marker
	}
	x.mu.RLock()
	ix := x.idx[name]
	if ix == nil {
		x.mu.RUnlock()
		return nil, gofakes3.BucketNotFound(name)
	}
	ix.ascend(from, func(k string) bool {
		if !strings.HasPrefix(k, p) {
			return false
		}
		cp := ""
		if delim != "" {
			if j := strings.Index(k[len(p):], delim); j >= 0 {
				cp = k[:len(p)+j+len(delim)]
			}
		}
		if cp != "" && cp == lastCP {
			next = k // still inside the common prefix just returned
			return true
		}
		if page.MaxKeys > 0 && int64(len(entries)) == page.MaxKeys {
			truncated = true
			return false
		}
		if cp != "" {
			entries = append(entries, entry{cp, true})
			lastCP = cp
		} else {
			entries = append(entries, entry{k, false})
		}
		next = k
		return true
	})
	x.mu.RUnlock()

	out := gofakes3.NewObjectList()
	for _, e := range entries {
		if e.common {
			out.AddPrefix(e.key)
			continue
		}
		obj, err := x.Backend.HeadObject(name, e.key)
		if gofakes3.HasErrorCode(err, gofakes3.ErrNoSuchKey) {
			continue // deleted since the index was read
		}
		if err != nil {
			return nil, err
		}
		if obj.Contents != nil {
			_ = obj.Contents.Close()
		}
		mod, _ := time.Parse(http.TimeFormat, obj.Metadata["Last-Modified"])
		out.Add(&gofakes3.Content{Key: e.key, ETag: gofakes3.FormatETag(obj.Hash), Size: obj.Size,
			LastModified: gofakes3.NewContentTime(mod)})
	}
	if truncated {
		// gofakes3 sends a continuation token whenever NextMarker is set.
		out.IsTruncated, out.NextMarker = true, next
	}
	return out, nil
}
