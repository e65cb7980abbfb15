package cache

import (
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestFlatMatchesLRU runs the same random operations on a flat shard and
// on LRU, and holds the two to the same answers, evictions and counters.
func TestFlatMatchesLRU(t *testing.T) {
	for _, size := range []int{1, 2, 7, 64} {
		f, l := newFlat[int, int](size), New[int, int](size)
		r := rand.New(rand.NewPCG(1, uint64(size)))
		for op := 0; op < 20000; op++ {
			k, v := r.IntN(3*size+2), r.Int()
			switch r.IntN(3) {
			case 0:
				gv, gok := f.get(k, true)
				wv, wok := l.Get(k)
				if gv != wv || gok != wok {
					t.Fatalf("size %d op %d: get(%d) = %d, %v; LRU gives %d, %v", size, op, k, gv, gok, wv, wok)
				}
			case 1:
				gv, gok := f.get(k, false)
				wv, wok := l.Peek(k)
				if gv != wv || gok != wok {
					t.Fatalf("size %d op %d: peek(%d) = %d, %v; LRU gives %d, %v", size, op, k, gv, gok, wv, wok)
				}
			default:
				if got, want := f.add(k, v), l.Add(k, v); got != want {
					t.Fatalf("size %d op %d: add(%d) evicted %v, LRU %v", size, op, k, got, want)
				}
			}
		}
		if got, want := f.statsNow(), l.Stats(); got != want {
			t.Errorf("size %d: stats %+v, LRU's %+v", size, got, want)
		}
	}
}

// TestShardedHoldsNoObjectPerEntry pins what flat shards are for: a full
// cache of hashes and counts is a handful of objects for the collector,
// not one per entry.
func TestShardedHoldsNoObjectPerEntry(t *testing.T) {
	type key struct {
		h uint64
		n int
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := NewSharded[key, int32](100000, func(k key) uint64 { return k.h })
	for i := range 100000 {
		s.Add(key{uint64(i) * 0x9E3779B97F4A7C15, i}, int32(i))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if d := int64(after.HeapObjects) - int64(before.HeapObjects); d > 500 {
		t.Errorf("a full cache of %d entries is %d heap objects, want a few per shard", s.Stats().Len, d)
	}
	runtime.KeepAlive(s)
}
