package budget

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
)

// DefaultCacheEntries is the default bound of a count cache
// (tokens.cache_entries).
const DefaultCacheEntries = 100000

// Caching remembers the counts of another Counter, so that a conversation
// resent with one new message only tokenizes the new one (seed 004,
// requirement 2.4: previously counted messages return cached values).
//
// Entries are keyed by a 64-bit seeded hash of the text (the text itself is
// not kept, so a cached 10 MB message costs 16 bytes) together with the
// text's length; the seed is per counter, so counters of two encodings
// sharing a store never see each other's entries. The store is bounded and
// evicts with CLOCK (second chance), which keeps the entries in use — the
// messages of live conversations — at the cost of one bit per entry.
// Caching is safe for concurrent use.
type Caching struct {
	inner Counter
	seed  maphash.Seed
	store *countStore
}

// NewCaching returns a cache of at most entries counts (0 means
// DefaultCacheEntries) in front of c.
func NewCaching(c Counter, entries int) *Caching {
	return newCaching(c, newCountStore(entries))
}

func newCaching(c Counter, s *countStore) *Caching {
	return &Caching{inner: c, seed: maphash.MakeSeed(), store: s}
}

// Name returns the inner counter's name.
func (c *Caching) Name() string { return c.inner.Name() }

// Inner returns the counter whose counts are cached.
func (c *Caching) Inner() Counter { return c.inner }

// Count returns the cached count of text, counting it on a miss.
func (c *Caching) Count(text string) int {
	if text == "" {
		return 0
	}
	key := maphash.String(c.seed, text)
	if n, ok := c.store.get(key, len(text)); ok {
		return n
	}
	n := c.inner.Count(text)
	c.store.put(key, len(text), n)
	return n
}

// peek returns the count of text if it is in the cache, without touching
// the statistics or the entry's use bit.
func (c *Caching) peek(text string) (int, bool) {
	if text == "" {
		return 0, true
	}
	return c.store.peek(maphash.String(c.seed, text), len(text))
}

// Stats reports the cache's use; counters sharing a store report the same.
func (c *Caching) Stats() CacheStats { return c.store.stats() }

// CacheStats describes a count cache.
type CacheStats struct {
	Hits, Misses, Evictions uint64
	// Entries is the number of counts held, at most Capacity.
	Entries, Capacity int
}

// countStore is a sharded CLOCK cache from (hash, length) to a count.
type countStore struct {
	shards       []countShard
	hits, misses atomic.Uint64
	capacity     int
}

type countShard struct {
	mu        sync.Mutex
	index     map[uint64]int32
	slots     []countSlot
	hand      int
	limit     int
	evictions uint64
	_         [32]byte // keep shards' locks on separate cache lines
}

type countSlot struct {
	key    uint64
	size   uint32 // low bits of the text length: a second check on the key
	tokens int32
	ref    bool
}

func newCountStore(entries int) *countStore {
	if entries <= 0 {
		entries = DefaultCacheEntries
	}
	n := 16
	for n > 1 && entries/n < 64 {
		n /= 2
	}
	per := (entries + n - 1) / n
	s := &countStore{shards: make([]countShard, n), capacity: per * n}
	for i := range s.shards {
		s.shards[i].limit = per
		s.shards[i].index = make(map[uint64]int32, min(per, 1024))
	}
	return s
}

func (s *countStore) shard(key uint64) *countShard {
	// The low bits pick the map bucket; use the high ones for the shard.
	return &s.shards[(key>>56)%uint64(len(s.shards))]
}

func (s *countStore) get(key uint64, size int) (int, bool) {
	sh := s.shard(key)
	sh.mu.Lock()
	i, ok := sh.index[key]
	if ok && sh.slots[i].size == uint32(size) {
		sh.slots[i].ref = true
		n := int(sh.slots[i].tokens)
		sh.mu.Unlock()
		s.hits.Add(1)
		return n, true
	}
	sh.mu.Unlock()
	s.misses.Add(1)
	return 0, false
}

func (s *countStore) peek(key uint64, size int) (int, bool) {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i, ok := sh.index[key]; ok && sh.slots[i].size == uint32(size) {
		return int(sh.slots[i].tokens), true
	}
	return 0, false
}

func (s *countStore) put(key uint64, size, tokens int) {
	t := int32(min(tokens, math.MaxInt32))
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i, ok := sh.index[key]; ok {
		sh.slots[i] = countSlot{key: key, size: uint32(size), tokens: t}
		return
	}
	if len(sh.slots) < sh.limit {
		sh.index[key] = int32(len(sh.slots))
		sh.slots = append(sh.slots, countSlot{key: key, size: uint32(size), tokens: t})
		return
	}
	// Second chance: skip (and clear) recently used slots.
	for sh.slots[sh.hand].ref {
		sh.slots[sh.hand].ref = false
		sh.hand = (sh.hand + 1) % len(sh.slots)
	}
	i := sh.hand
	delete(sh.index, sh.slots[i].key)
	sh.slots[i] = countSlot{key: key, size: uint32(size), tokens: t}
	sh.index[key] = int32(i)
	sh.hand = (i + 1) % len(sh.slots)
	sh.evictions++
}

func (s *countStore) stats() CacheStats {
	st := CacheStats{Hits: s.hits.Load(), Misses: s.misses.Load(), Capacity: s.capacity}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Entries += len(sh.slots)
		st.Evictions += sh.evictions
		sh.mu.Unlock()
	}
	return st
}
