package fakes3

import (
	"slices"
	"strings"
)

// keyIndex keeps a set of keys in order, so that Mem can serve a LIST in
// O(log n + page) and insert or delete a key in O(log n + chunk) however
// many keys it holds (a benchmark holds a few hundred thousand). The keys
// are in sorted chunks of at most maxChunk; every chunk is non-empty, and
// every key of a chunk sorts before every key of the next.
type keyIndex struct {
	chunks [][]string
}

const maxChunk = 512

// chunk returns the index of the chunk key belongs in: the first whose
// last key is ≥ key, else the last chunk.
func (x *keyIndex) chunk(key string) int {
	i, _ := slices.BinarySearchFunc(x.chunks, key, func(c []string, k string) int {
		return strings.Compare(c[len(c)-1], k)
	})
	return min(i, len(x.chunks)-1)
}

// insert adds key, which must not be present.
func (x *keyIndex) insert(key string) {
	if len(x.chunks) == 0 {
		x.chunks = [][]string{{key}}
		return
	}
	ci := x.chunk(key)
	c := x.chunks[ci]
	i, _ := slices.BinarySearch(c, key)
	c = slices.Insert(c, i, key)
	if len(c) <= maxChunk {
		x.chunks[ci] = c
		return
	}
	half := len(c) / 2
	lo, hi := slices.Clone(c[:half]), slices.Clone(c[half:])
	x.chunks[ci] = lo
	x.chunks = slices.Insert(x.chunks, ci+1, hi)
}

// has reports whether key is present.
func (x *keyIndex) has(key string) bool {
	if len(x.chunks) == 0 {
		return false
	}
	_, ok := slices.BinarySearch(x.chunks[x.chunk(key)], key)
	return ok
}

// remove deletes key if present.
func (x *keyIndex) remove(key string) {
	if len(x.chunks) == 0 {
		return
	}
	ci := x.chunk(key)
	c := x.chunks[ci]
	i, ok := slices.BinarySearch(c, key)
	if !ok {
		return
	}
	if len(c) == 1 {
		x.chunks = slices.Delete(x.chunks, ci, ci+1)
		return
	}
	x.chunks[ci] = slices.Delete(c, i, i+1)
}

// ascend calls fn with every key ≥ from, in order, until fn returns false.
func (x *keyIndex) ascend(from string, fn func(key string) bool) {
	if len(x.chunks) == 0 {
		return
	}
	ci := x.chunk(from)
	i, _ := slices.BinarySearch(x.chunks[ci], from)
	for ; ci < len(x.chunks); ci, i = ci+1, 0 {
		for _, k := range x.chunks[ci][i:] {
			if !fn(k) {
				return
			}
		}
	}
}
