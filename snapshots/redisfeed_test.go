package snapshots

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// follower reads a feed into a list until its test ends.
type follower struct {
	mu  sync.Mutex
	got []string
}

func follow(t *testing.T, f *Feed) *follower {
	ctx, stop := context.WithCancel(context.Background())
	fl := &follower{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Follow(ctx, func(d []byte) {
			fl.mu.Lock()
			fl.got = append(fl.got, string(d))
			fl.mu.Unlock()
		})
	}()
	t.Cleanup(func() { stop(); <-done })
	return fl
}

// wait returns the entries read, once there are n, failing the test
// after 5 s.
func (fl *follower) wait(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		fl.mu.Lock()
		got := slices.Clone(fl.got)
		fl.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("read %d entries of %d", len(got), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFeedOneOrder: entries appended by two replicas at once are read in
// one order by every follower, and a follower that starts later reads
// them all from the first.
func TestFeedOneOrder(t *testing.T) {
	addr := startRedis(t)
	prefix := fmt.Sprintf("feed%d:", prefixes.Add(1))
	a, b := newRedisStore(t, addr, prefix, Config{}), newRedisStore(t, addr, prefix, Config{})
	fa, fb := follow(t, NewFeed(a, "test")), follow(t, NewFeed(b, "test"))
	var wg sync.WaitGroup
	for i, st := range []*RedisStore{a, b} {
		wg.Go(func() {
			for k := range 100 {
				if err := NewFeed(st, "test").Append(context.Background(), fmt.Appendf(nil, "%d-%d", i, k)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	ga, gb := fa.wait(t, 200), fb.wait(t, 200)
	if !slices.Equal(ga, gb) {
		t.Fatal("two followers read the feed in different orders")
	}
	late := follow(t, NewFeed(newRedisStore(t, addr, prefix, Config{}), "test")).wait(t, 200)
	if !slices.Equal(late, ga) {
		t.Fatal("a follower started later read another order")
	}
	other := follow(t, NewFeed(a, "other"))
	time.Sleep(50 * time.Millisecond)
	if n := len(other.wait(t, 0)); n != 0 {
		t.Errorf("another feed read %d entries of this one", n)
	}
}
