package fakes3

import (
	"bytes"
	"io"
	"sync"

	"github.com/johannesboyne/gofakes3"
)

// boltSafe makes gofakes3's bbolt backend safe to read under concurrent
// writes. s3bolt decodes objects with bson, whose []byte fields alias
// bbolt's memory map, and hands the body out after its read transaction has
// ended; a write that grows the file remaps it, and the reader then copies
// from unmapped memory (SIGSEGV, seen under `go test -race` with parallel
// PUTs and GETs). boltSafe runs every read, and the copy of what it
// returns, under a read lock that every write excludes.
type boltSafe struct {
	gofakes3.Backend
	mu sync.RWMutex
}

func (b *boltSafe) GetObject(bucketName, objectName string, rng *gofakes3.ObjectRangeRequest) (*gofakes3.Object, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	obj, err := b.Backend.GetObject(bucketName, objectName, rng)
	if err != nil || obj == nil {
		return obj, err
	}
	return detach(obj)
}

func (b *boltSafe) HeadObject(bucketName, objectName string) (*gofakes3.Object, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	obj, err := b.Backend.HeadObject(bucketName, objectName)
	if err != nil || obj == nil {
		return obj, err
	}
	return detach(obj)
}

// detach copies every byte slice of obj out of the memory map.
func detach(obj *gofakes3.Object) (*gofakes3.Object, error) {
	c := *obj
	c.Hash = bytes.Clone(obj.Hash)
	if obj.Contents != nil {
		body, err := io.ReadAll(obj.Contents)
		obj.Contents.Close()
		if err != nil {
			return nil, err
		}
		c.Contents = io.NopCloser(bytes.NewReader(body))
	}
	return &c, nil
}

func (b *boltSafe) ListBucket(name string, prefix *gofakes3.Prefix, page gofakes3.ListBucketPage) (*gofakes3.ObjectList, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.Backend.ListBucket(name, prefix, page)
}

func (b *boltSafe) ListBuckets() ([]gofakes3.BucketInfo, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.Backend.ListBuckets()
}

func (b *boltSafe) BucketExists(name string) (bool, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.Backend.BucketExists(name)
}

func (b *boltSafe) CreateBucket(name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Backend.CreateBucket(name)
}

func (b *boltSafe) DeleteBucket(name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Backend.DeleteBucket(name)
}

func (b *boltSafe) ForceDeleteBucket(name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Backend.ForceDeleteBucket(name)
}

func (b *boltSafe) PutObject(bucketName, key string, meta map[string]string, input io.Reader, size int64, cond *gofakes3.PutConditions) (gofakes3.PutObjectResult, error) {
	// Read the body before taking the lock: a slow client must not stall
	// every reader.
	body, err := gofakes3.ReadAll(input, size)
	if err != nil {
		return gofakes3.PutObjectResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Backend.PutObject(bucketName, key, meta, bytes.NewReader(body), size, cond)
}

func (b *boltSafe) DeleteObject(bucketName, objectName string) (gofakes3.ObjectDeleteResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Backend.DeleteObject(bucketName, objectName)
}

func (b *boltSafe) DeleteMulti(bucketName string, objects ...string) (gofakes3.MultiDeleteResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Backend.DeleteMulti(bucketName, objects...)
}

func (b *boltSafe) CopyObject(srcBucket, srcKey, dstBucket, dstKey string, meta map[string]string) (gofakes3.CopyObjectResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Backend.CopyObject(srcBucket, srcKey, dstBucket, dstKey, meta)
}
