package fakes3

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"

	"github.com/deedkit/deed/errcode"
)

// The bbolt file layout checkStoreFile reads (bbolt v1, format version 2):
// two meta pages at page 0 and page 1, each a 16-byte page header followed
// by magic, version, page size, flags (uint32 each), the root bucket (root
// page, sequence), the freelist page, the high-water page id, the txid and
// an FNV-64a checksum of the 56 bytes before it (uint64 each), in the
// machine's byte order.
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	boltPageHeader = 16
	boltMetaLen    = 64
)

// boltMeta is the part of a meta page checkStoreFile needs.
type boltMeta struct {
	pageSize uint32
	root     uint64
	freelist uint64
	pgid     uint64 // pages in use: the file holds at least pgid pages
	txid     uint64
}

// parseBoltMeta decodes and verifies the meta page at the start of b.
func parseBoltMeta(b []byte) (boltMeta, bool) {
	if len(b) < boltPageHeader+boltMetaLen {
		return boltMeta{}, false
	}
	m := b[boltPageHeader : boltPageHeader+boltMetaLen]
	o := binary.NativeEndian
	if o.Uint32(m[0:]) != boltMagic || o.Uint32(m[4:]) != boltVersion {
		return boltMeta{}, false
	}
	h := fnv.New64a()
	h.Write(m[:56])
	if sum := o.Uint64(m[56:]); sum != 0 && sum != h.Sum64() {
		return boltMeta{}, false
	}
	meta := boltMeta{pageSize: o.Uint32(m[8:]), root: o.Uint64(m[16:]), freelist: o.Uint64(m[32:]),
		pgid: o.Uint64(m[40:]), txid: o.Uint64(m[48:])}
	if meta.pageSize < 1024 || meta.pageSize > 1<<20 || meta.pageSize&(meta.pageSize-1) != 0 {
		return boltMeta{}, false
	}
	return meta, true
}

// checkStoreFile refuses a store file that bbolt would open as an empty
// store or map past its end. bbolt initialises a zero-length file as a new,
// empty database — a store file truncated to nothing would silently come
// back empty — and trusts the meta page's page count without comparing it
// with the file's size, so a truncated file crashes the process with
// SIGBUS on the first read of a page past the end. A missing file is a new
// store; anything else must be a whole bbolt file. The error is DEED-E032
// naming the file, and the file is left as it is: a store that looks
// damaged is never replaced.
func checkStoreFile(path string) error {
	corrupt := func(format string, args ...any) error {
		return errcode.Errorf(errcode.CodeCorruptStore, "corrupt store file %s: %s; it is left untouched (move it away to start an empty store)", path, fmt.Sprintf(format, args...))
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open fakes3 store %s: %w", path, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("open fakes3 store %s: %w", path, err)
	}
	size := info.Size()
	if size == 0 {
		return corrupt("empty (0 bytes)")
	}
	// Meta page 0 gives the page size; when it is damaged bbolt looks for
	// meta page 1 at the OS page size, and so does this.
	buf := make([]byte, boltPageHeader+boltMetaLen)
	var metas []boltMeta
	m0, ok0 := readBoltMeta(f, 0, buf)
	if ok0 {
		metas = append(metas, m0)
	}
	step := int64(os.Getpagesize())
	if ok0 {
		step = int64(m0.pageSize)
	}
	if m1, ok := readBoltMeta(f, step, buf); ok {
		metas = append(metas, m1)
	}
	if len(metas) == 0 {
		return corrupt("%d bytes and no valid bbolt meta page", size)
	}
	// bbolt uses the valid meta page with the newer transaction.
	m := metas[0]
	if len(metas) == 2 && metas[1].txid > m.txid {
		m = metas[1]
	}
	need := int64(m.pgid) * int64(m.pageSize)
	if m.pgid > uint64(1<<62)/uint64(m.pageSize) || m.root >= m.pgid || m.freelist >= m.pgid && m.freelist != ^uint64(0) {
		return corrupt("meta page names page %d, %d or %d", m.pgid, m.root, m.freelist)
	}
	if size < need {
		return corrupt("truncated: %d bytes, its meta page says %d pages of %d bytes (%d)", size, m.pgid, m.pageSize, need)
	}
	return nil
}

func readBoltMeta(f *os.File, off int64, buf []byte) (boltMeta, bool) {
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return boltMeta{}, false
	}
	return parseBoltMeta(buf)
}
