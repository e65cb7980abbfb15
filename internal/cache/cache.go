// Package cache is ctxproxy's one bounded map. Whatever a cache is keyed
// by — session ids, model names, digests, hashes of message texts — it
// comes from clients, so every cache holds at most a fixed number of
// entries and, when full, lets the least recently used one go: a hot
// entry survives a flood of new keys, and nothing is ever wiped at once.
//
// LRU wraps hashicorp/golang-lru's simplelru under a lock of its own, so
// that it can offer what the library's locked Cache cannot do in one step
// (Swap, Take) and count its hits, misses and evictions for metrics.
// Sharded spreads one bound over several LRUs for the counting hot path,
// where every core looks up message counts at once.
package cache

import (
	"iter"
	"slices"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// LRU is a map of at most Size entries that drops the least recently used
// entry to make room. It is safe for concurrent use.
type LRU[K comparable, V any] struct {
	mu    sync.Mutex
	c     *simplelru.LRU[K, V]
	size  int
	stats Stats
}

// Stats describe a cache's use since it was made.
type Stats struct {
	// Hits and Misses count Get (and Swap) look-ups; Peek is not counted.
	Hits, Misses uint64
	// Evictions counts entries dropped to make room.
	Evictions uint64
	// Len is the number of entries held, at most Size.
	Len, Size int
}

// New returns an LRU of at most size entries; a size below 1 means 1.
func New[K comparable, V any](size int) *LRU[K, V] {
	size = max(size, 1)
	c, err := simplelru.NewLRU[K, V](size, nil)
	if err != nil {
		panic(err) // unreachable: size is positive
	}
	return &LRU[K, V]{c: c, size: size}
}

// Get returns the value of k and marks it used.
func (l *LRU[K, V]) Get(k K) (V, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.c.Get(k)
	l.count(ok)
	return v, ok
}

// Peek returns the value of k without marking it used.
func (l *LRU[K, V]) Peek(k K) (V, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c.Peek(k)
}

// Add stores v under k, marks it used, and reports whether another entry
// was dropped to make room.
func (l *LRU[K, V]) Add(k K, v V) (evicted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.add(k, v)
}

// Push stores v under k as the most recently used entry and returns the
// entry it displaced, if any: k's previous value, or the least recently
// used entry dropped to make room. It is Add for values that hold
// something to release (open files), which the caller releases.
func (l *LRU[K, V]) Push(k K, v V) (oldK K, oldV V, displaced bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if prev, ok := l.c.Peek(k); ok {
		l.c.Add(k, v)
		return k, prev, true
	}
	if l.c.Len() >= l.size {
		oldK, oldV, displaced = l.c.RemoveOldest()
		l.stats.Evictions++
	}
	l.c.Add(k, v)
	return oldK, oldV, displaced
}

// Swap stores v under k and returns what k held before, in one step: two
// callers swapping the same key each see the other's value, never the
// same old one.
func (l *LRU[K, V]) Swap(k K, v V) (old V, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old, ok = l.c.Peek(k)
	l.count(ok)
	l.add(k, v)
	return old, ok
}

// Take removes k and returns its value, in one step: of two callers
// taking the same key, one gets it.
func (l *LRU[K, V]) Take(k K) (V, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.c.Peek(k)
	if ok {
		l.c.Remove(k)
	}
	return v, ok
}

// Remove drops k.
func (l *LRU[K, V]) Remove(k K) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.c.Remove(k)
}

// Len returns the number of entries held.
func (l *LRU[K, V]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c.Len()
}

// All yields the entries held when it is called, most recently used
// first, without marking them used. The cache is not locked while the
// loop body runs, so the body may use it.
func (l *LRU[K, V]) All() iter.Seq2[K, V] {
	l.mu.Lock()
	keys, values := l.c.Keys(), l.c.Values() // oldest first
	l.mu.Unlock()
	slices.Reverse(keys)
	slices.Reverse(values)
	return func(yield func(K, V) bool) {
		for i, k := range keys {
			if !yield(k, values[i]) {
				return
			}
		}
	}
}

// Stats returns the cache's counters.
func (l *LRU[K, V]) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Len, s.Size = l.c.Len(), l.size
	return s
}

// add stores v under k; l.mu is held.
func (l *LRU[K, V]) add(k K, v V) bool {
	evicted := l.c.Add(k, v)
	if evicted {
		l.stats.Evictions++
	}
	return evicted
}

// count records a look-up; l.mu is held.
func (l *LRU[K, V]) count(hit bool) {
	if hit {
		l.stats.Hits++
	} else {
		l.stats.Misses++
	}
}

// Sharded is an LRU split into shards, each with its own lock, so that
// look-ups from many goroutines at once do not queue on one lock. Its
// shards hold their entries in slices (flat), so a cache of keys and
// values without pointers costs the garbage collector nothing per entry. Each
// shard evicts its own least recently used entry: recency is per shard,
// which, with keys spread evenly, keeps what a single LRU keeps. It is
// safe for concurrent use.
type Sharded[K comparable, V any] struct {
	shards []*flat[K, V]
	hash   func(K) uint64
}

// minShard is the fewest entries a shard holds: below it, a few hot keys
// that happen to share a shard would push each other out.
const minShard = 64

// NewSharded returns a cache of about size entries in all (a little more
// when size does not divide evenly), spread over up to 16 shards by hash.
// hash must spread keys evenly over its high bits, which pick the shard
// (a map hash or maphash sum does).
func NewSharded[K comparable, V any](size int, hash func(K) uint64) *Sharded[K, V] {
	size = max(size, 1)
	n := 16
	for n > 1 && size/n < minShard {
		n /= 2
	}
	per := (size + n - 1) / n
	s := &Sharded[K, V]{shards: make([]*flat[K, V], n), hash: hash}
	for i := range s.shards {
		s.shards[i] = newFlat[K, V](per)
	}
	return s
}

func (s *Sharded[K, V]) shard(k K) *flat[K, V] {
	// The low bits of a map-friendly hash pick buckets inside the
	// shard's map; the high ones pick the shard.
	return s.shards[(s.hash(k)>>56)%uint64(len(s.shards))]
}

// Get returns the value of k and marks it used.
func (s *Sharded[K, V]) Get(k K) (V, bool) { return s.shard(k).get(k, true) }

// Peek returns the value of k without marking it used.
func (s *Sharded[K, V]) Peek(k K) (V, bool) { return s.shard(k).get(k, false) }

// Add stores v under k and reports whether an entry of its shard was
// dropped to make room.
func (s *Sharded[K, V]) Add(k K, v V) bool { return s.shard(k).add(k, v) }

// Stats returns the counters summed over the shards.
func (s *Sharded[K, V]) Stats() Stats {
	var t Stats
	for _, sh := range s.shards {
		st := sh.statsNow()
		t.Hits += st.Hits
		t.Misses += st.Misses
		t.Evictions += st.Evictions
		t.Len += st.Len
		t.Size += st.Size
	}
	return t
}
