package budget

import (
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
)

// The second count of a text comes from the
// cache (the inner counter is not asked again). That it is faster is
// measured by BenchmarkCachingHit, not asserted here.
func TestCachingCountsATextOnce(t *testing.T) {
	inner := &countingCounter{Counter: mustTiktoken(t, tokenizer.EncodingCL100K)}
	c := NewCaching(inner, 0)
	first := c.Count("The quick brown fox")
	second := c.Count("The quick brown fox")
	if first != second || first != 4 {
		t.Errorf("counts %d, %d, want 4, 4", first, second)
	}
	if got := inner.calls(); got != 1 {
		t.Errorf("inner counter called %d times, want 1", got)
	}
	st := c.Stats()
	if st.Hits != 1 || st.Misses != 1 || st.Entries != 1 {
		t.Errorf("Stats = %+v, want 1 hit, 1 miss, 1 entry", st)
	}
	if got := c.Count(""); got != 0 {
		t.Errorf("Count(\"\") = %d", got)
	}
}

func TestCachingBounded(t *testing.T) {
	c := NewCaching(tokenizer.Approx{}, 1000)
	for i := range 5000 {
		c.Count("text " + strconv.Itoa(i))
	}
	st := c.Stats()
	if st.Entries > st.Capacity || st.Capacity < 1000 || st.Capacity > 1100 {
		t.Errorf("Stats = %+v: entries over capacity, or capacity far from 1000", st)
	}
	if st.Evictions == 0 {
		t.Errorf("no evictions after 5000 distinct texts")
	}
	if got, want := c.Count("text 4999"), (tokenizer.Approx{}).Count("text 4999"); got != want {
		t.Errorf("count after eviction = %d, want %d", got, want)
	}
}

// An entry in use survives a flood of new texts.
func TestCachingKeepsHotEntries(t *testing.T) {
	inner := &countingCounter{Counter: tokenizer.Approx{}}
	c := NewCaching(inner, 64) // one shard of 64
	c.Count("hot")
	for i := range 1000 {
		c.Count("hot")
		c.Count("cold " + strconv.Itoa(i))
	}
	calls := 0
	for _, s := range inner.texts {
		if s == "hot" {
			calls++
		}
	}
	if calls != 1 {
		t.Errorf("hot text counted %d times, want 1", calls)
	}
}

// Same hash, different length: the length check keeps them apart. The
// store is exercised directly, since real 64-bit collisions cannot be made.
func TestCountStoreChecksLength(t *testing.T) {
	s := newCountStore(100)
	s.put(42, 10, 7)
	if _, ok := s.get(42, 11); ok {
		t.Errorf("hit with a different length")
	}
	if n, ok := s.get(42, 10); !ok || n != 7 {
		t.Errorf("get = %d, %v, want 7, true", n, ok)
	}
}

func TestCachingConcurrent(t *testing.T) {
	c := NewCaching(mustTiktoken(t, tokenizer.EncodingCL100K), 500)
	texts := make([]string, 200)
	want := make([]int, len(texts))
	for i := range texts {
		texts[i] = strings.Repeat("word ", i) + strconv.Itoa(i)
		want[i] = c.Inner().Count(texts[i])
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 2000 {
				i := (k*7 + g) % len(texts)
				if got := c.Count(texts[i]); got != want[i] {
					t.Errorf("Count(text %d) = %d, want %d", i, got, want[i])
					return
				}
			}
		})
	}
	wg.Wait()
}

// Two counters sharing a store never see each other's counts.
func TestCachingSharedStoreSeparatesEncodings(t *testing.T) {
	r := NewRegistry(Config{}, nil)
	cl, o2 := r.CounterFor("gpt-4"), r.CounterFor("gpt-4o")
	text := readTestdata(t, "mixed.txt")
	a, b := cl.Count(text), o2.Count(text)
	if a == b {
		t.Fatalf("cl100k and o200k agree on mixed.txt (%d); pick a text where they differ", a)
	}
	if a2, b2 := cl.Count(text), o2.Count(text); a2 != a || b2 != b {
		t.Errorf("cached counts %d, %d, want %d, %d", a2, b2, a, b)
	}
}
