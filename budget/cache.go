package budget

import (
	"hash/maphash"
	"math"

	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/internal/cache"
)

// DefaultCacheEntries is the default bound of a count cache
// (tokens.cache_entries).
const DefaultCacheEntries = 100000

// Caching remembers the counts of a tokenizer.Counter, so that a
// conversation resent with one new message only tokenizes the new one: a
// message counted before costs a lookup. Caching is a Counter too.
//
// Entries are keyed by a 64-bit seeded hash of the text (the text itself is
// not kept, so a cached 10 MB message costs 16 bytes) together with the
// text's length; the seed is per counter, so counters of two encodings
// sharing a store never see each other's entries. The store is bounded and
// evicts the least recently used entry, which keeps the entries in use —
// the messages of live conversations. Caching is safe for concurrent use.
type Caching struct {
	inner tokenizer.Counter
	seed  maphash.Seed
	store *countStore
}

// NewCaching returns a cache of at most entries counts (0 means
// DefaultCacheEntries) in front of c.
func NewCaching(c tokenizer.Counter, entries int) *Caching {
	return newCaching(c, newCountStore(entries))
}

func newCaching(c tokenizer.Counter, s *countStore) *Caching {
	return &Caching{inner: c, seed: maphash.MakeSeed(), store: s}
}

// Name returns the inner counter's name.
func (c *Caching) Name() string { return c.inner.Name() }

// Inner returns the counter whose counts are cached.
func (c *Caching) Inner() tokenizer.Counter { return c.inner }

// Count returns the cached count of text, counting it on a miss.
func (c *Caching) Count(text string) int {
	if text == "" {
		return 0
	}
	key, n, ok := c.lookup(text)
	if ok {
		return n
	}
	return c.countMiss(key, text)
}

// lookup returns text's key and its cached count, if any, as Count would
// find it (the entry's recency and the statistics are updated).
func (c *Caching) lookup(text string) (key uint64, n int, ok bool) {
	if text == "" {
		return 0, 0, true
	}
	key = maphash.String(c.seed, text)
	n, ok = c.store.get(key, len(text))
	return key, n, ok
}

// countMiss counts text, whose key lookup did not find, and caches it.
func (c *Caching) countMiss(key uint64, text string) int {
	n := c.inner.Count(text)
	c.store.put(key, len(text), n)
	return n
}

// Stats reports the cache's use; counters sharing a store report the same.
func (c *Caching) Stats() CacheStats { return c.store.stats() }

// CacheStats describes a count cache.
type CacheStats struct {
	Hits, Misses, Evictions uint64
	// Entries is the number of counts held, at most Capacity.
	Entries, Capacity int
}

// countStore maps (hash, length) of a text to its count: the length is
// a second check on the 64-bit hash. It is internal/cache's sharded LRU,
// so that counting on every core at once does not queue on one lock.
type countStore struct {
	c *cache.Sharded[countKey, int32]
}

type countKey struct {
	hash uint64
	size int
}

func newCountStore(entries int) *countStore {
	if entries <= 0 {
		entries = DefaultCacheEntries
	}
	return &countStore{c: cache.NewSharded[countKey, int32](entries, func(k countKey) uint64 { return k.hash })}
}

func (s *countStore) get(key uint64, size int) (int, bool) {
	n, ok := s.c.Get(countKey{key, size})
	return int(n), ok
}

func (s *countStore) put(key uint64, size, tokens int) {
	s.c.Add(countKey{key, size}, int32(min(tokens, math.MaxInt32)))
}

func (s *countStore) stats() CacheStats {
	st := s.c.Stats()
	return CacheStats{Hits: st.Hits, Misses: st.Misses, Evictions: st.Evictions, Entries: st.Len, Capacity: st.Size}
}
