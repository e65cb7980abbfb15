package cache

import (
	"hash/maphash"
	"slices"
	"strconv"
	"sync"
	"testing"
)

// A key in use survives any number of new keys: the bound is met by
// dropping the least recently used one, never by starting over.
func TestLRUHotEntrySurvivesFlood(t *testing.T) {
	l := New[string, int](100)
	l.Add("hot", 1)
	for i := range 10000 {
		l.Add(strconv.Itoa(i), i)
		if _, ok := l.Get("hot"); !ok {
			t.Fatalf("hot entry dropped after %d new keys", i+1)
		}
	}
	if n := l.Len(); n != 100 {
		t.Errorf("Len = %d, want 100 (full, not wiped)", n)
	}
	// The newest keys are the ones kept besides the hot one.
	if _, ok := l.Peek("9999"); !ok {
		t.Error("newest key missing")
	}
	if _, ok := l.Peek("0"); ok {
		t.Error("oldest key still held")
	}
	st := l.Stats()
	if st.Evictions != 10000+1-100 || st.Hits != 10000 || st.Len != 100 || st.Size != 100 {
		t.Errorf("Stats = %+v", st)
	}
}

func TestLRUPeekDoesNotMarkUsed(t *testing.T) {
	l := New[string, int](2)
	l.Add("a", 1)
	l.Add("b", 2)
	l.Peek("a")
	l.Add("c", 3) // drops a: Peek did not make it recent
	if _, ok := l.Peek("a"); ok {
		t.Error("a kept after Peek; want dropped as least recently used")
	}
	l.Get("b")
	l.Add("d", 4) // drops c
	if _, ok := l.Peek("b"); !ok {
		t.Error("b dropped after Get")
	}
}

func TestLRUSwapAndTake(t *testing.T) {
	l := New[string, int](4)
	if _, ok := l.Swap("s", 1); ok {
		t.Error("Swap on a new key reported a previous value")
	}
	if old, ok := l.Swap("s", 2); !ok || old != 1 {
		t.Errorf("Swap = %d, %v; want 1, true", old, ok)
	}
	if v, ok := l.Take("s"); !ok || v != 2 {
		t.Errorf("Take = %d, %v; want 2, true", v, ok)
	}
	if _, ok := l.Take("s"); ok {
		t.Error("second Take found the key")
	}
}

// Of many goroutines taking one key, exactly one gets it; of many swapping
// one key, each sees a distinct previous value.
func TestLRUAtomicSteps(t *testing.T) {
	l := New[string, int](8)
	l.Add("k", 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var olds []int
	for i := 1; i <= 50; i++ {
		wg.Go(func() {
			old, _ := l.Swap("k", i)
			mu.Lock()
			olds = append(olds, old)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(olds)
	if len(slices.Compact(olds)) != 50 {
		t.Errorf("Swap handed out a previous value twice: %v", olds)
	}
	got := make(chan bool, 50)
	for range 50 {
		wg.Go(func() {
			_, ok := l.Take("k")
			got <- ok
		})
	}
	wg.Wait()
	close(got)
	n := 0
	for ok := range got {
		if ok {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d goroutines took the key, want 1", n)
	}
}

func TestLRUAllMostRecentFirst(t *testing.T) {
	l := New[string, int](3)
	l.Add("a", 1)
	l.Add("b", 2)
	l.Add("c", 3)
	l.Get("a")
	var keys []string
	for k, v := range l.All() {
		keys = append(keys, k+strconv.Itoa(v))
		l.Peek(k) // the body may use the cache
	}
	if want := []string{"a1", "c3", "b2"}; !slices.Equal(keys, want) {
		t.Errorf("All = %v, want %v", keys, want)
	}
}

func TestNewSizeAtLeastOne(t *testing.T) {
	l := New[int, int](0)
	l.Add(1, 1)
	l.Add(2, 2)
	if l.Len() != 1 {
		t.Errorf("Len = %d, want 1", l.Len())
	}
}

func TestShardedBoundAndHotEntries(t *testing.T) {
	seed := maphash.MakeSeed()
	hash := func(k string) uint64 { return maphash.String(seed, k) }
	s := NewSharded[string, int](1000, hash)
	hot := []string{"system prompt", "first question", "tool result"}
	for i, k := range hot {
		s.Add(k, i)
	}
	for i := range 100000 {
		s.Add("flood "+strconv.Itoa(i), i)
		if i%50 == 0 {
			for _, k := range hot {
				if _, ok := s.Get(k); !ok {
					t.Fatalf("hot key %q dropped after %d new keys", k, i+1)
				}
			}
		}
	}
	st := s.Stats()
	if st.Len > st.Size || st.Size < 1000 || st.Size > 1000+len(s.shards) {
		t.Errorf("Stats = %+v: want Len ≤ Size ≈ 1000", st)
	}
	if st.Len < st.Size*9/10 {
		t.Errorf("Len = %d of %d: keys are not spread over the shards", st.Len, st.Size)
	}
}

func TestShardedConcurrent(t *testing.T) {
	s := NewSharded[uint64, int](512, func(k uint64) uint64 { return k * 0x9E3779B97F4A7C15 })
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				k := uint64(g*2000 + i)
				s.Add(k, i)
				if v, ok := s.Get(k); ok && v != i {
					t.Errorf("Get(%d) = %d, want %d", k, v, i)
				}
			}
		})
	}
	wg.Wait()
	if st := s.Stats(); st.Len > st.Size {
		t.Errorf("Len %d over Size %d", st.Len, st.Size)
	}
}

// Push hands back what it displaced, for the caller to release: the
// previous value of the key, or the least recently used entry.
func TestLRUPushReturnsTheDisplaced(t *testing.T) {
	l := New[string, int](2)
	for _, k := range []string{"a", "b"} {
		if _, _, displaced := l.Push(k, len(k)); displaced {
			t.Fatalf("Push(%s) into room displaced an entry", k)
		}
	}
	if k, v, displaced := l.Push("a", 10); !displaced || k != "a" || v != 1 {
		t.Errorf("Push(a) again = %s %d %v, want a's old value 1", k, v, displaced)
	}
	// b is now the least recently used.
	if k, v, displaced := l.Push("c", 3); !displaced || k != "b" || v != 1 {
		t.Errorf("Push(c) into a full cache = %s %d %v, want b dropped", k, v, displaced)
	}
	if _, ok := l.Peek("b"); ok || l.Len() != 2 || l.Stats().Evictions != 1 {
		t.Errorf("after the drop: b held %v, len %d, evictions %d", ok, l.Len(), l.Stats().Evictions)
	}
}
