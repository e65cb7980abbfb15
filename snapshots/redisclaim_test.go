package snapshots

import (
	"sync"
	"testing"
	"time"
)

// TestRedisClaim: a claim is held by one replica at a time, released only
// by its holder, and freed by its time to live when its holder never
// releases it.
func TestRedisClaim(t *testing.T) {
	addr := startRedis(t)
	a := newRedisStore(t, addr, "claims:", Config{})
	b := newRedisStore(t, addr, "claims:", Config{})

	tok, ok, err := a.Claim(ctx, "chat", "summary-1", time.Minute)
	if err != nil || !ok || tok == "" {
		t.Fatalf("first claim: %q, %v, %v", tok, ok, err)
	}
	if tok2, ok, err := b.Claim(ctx, "chat", "summary-1", time.Minute); err != nil || ok || tok2 != "" {
		t.Fatalf("claim held by another replica: %q, %v, %v", tok2, ok, err)
	}
	// Another name, or the same name in another session, is free.
	if _, ok, err := b.Claim(ctx, "chat", "summary-2", time.Minute); err != nil || !ok {
		t.Fatalf("another name: %v, %v", ok, err)
	}
	if _, ok, err := b.Claim(ctx, "other", "summary-1", time.Minute); err != nil || !ok {
		t.Fatalf("another session: %v, %v", ok, err)
	}
	// Only the holder's token releases it.
	if err := b.Release(ctx, "chat", "summary-1", "not-the-token"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := b.Claim(ctx, "chat", "summary-1", time.Minute); ok {
		t.Fatal("a release with another token ended the claim")
	}
	if err := a.Release(ctx, "chat", "summary-1", tok); err != nil {
		t.Fatal(err)
	}
	tokB, ok, err := b.Claim(ctx, "chat", "summary-1", time.Minute)
	if err != nil || !ok {
		t.Fatalf("claim after its release: %v, %v", ok, err)
	}
	// A late release by the first holder leaves the new holder's claim.
	if err := a.Release(ctx, "chat", "summary-1", tok); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := a.Claim(ctx, "chat", "summary-1", time.Minute); ok {
		t.Fatal("a stale token released another replica's claim")
	}
	if err := b.Release(ctx, "chat", "summary-1", tokB); err != nil {
		t.Fatal(err)
	}

	// A holder that dies: its claim ends with its time to live.
	if _, ok, err := a.Claim(ctx, "chat", "dead", 100*time.Millisecond); err != nil || !ok {
		t.Fatalf("%v, %v", ok, err)
	}
	waitFor(t, "the claim to expire", func() bool {
		_, ok, err := b.Claim(ctx, "chat", "dead", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})

	for _, bad := range []struct {
		id, name string
		ttl      time.Duration
	}{{"", "n", time.Second}, {"chat", "", time.Second}, {"chat", "n", 0}, {"chat", "n", time.Microsecond}} {
		if _, ok, err := a.Claim(ctx, bad.id, bad.name, bad.ttl); err == nil || ok {
			t.Errorf("Claim(%q, %q, %v) = %v, %v; want an error", bad.id, bad.name, bad.ttl, ok, err)
		}
	}
}

// TestRedisClaimOneWinner: replicas claiming one name at the same moment:
// exactly one gets it.
func TestRedisClaimOneWinner(t *testing.T) {
	addr := startRedis(t)
	var stores []*RedisStore
	for range 4 {
		stores = append(stores, newRedisStore(t, addr, "race:", Config{}))
	}
	for round := range 20 {
		var mu sync.Mutex
		var won []string
		var wg sync.WaitGroup
		for _, st := range stores {
			for range 5 {
				wg.Go(func() {
					tok, ok, err := st.Claim(ctx, "chat", "summary", time.Minute)
					if err != nil {
						t.Error(err)
					}
					if ok {
						mu.Lock()
						won = append(won, tok)
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("round %d: %d claims won, want 1", round, len(won))
		}
		if err := stores[round%len(stores)].Release(ctx, "chat", "summary", won[0]); err != nil {
			t.Fatal(err)
		}
	}
}

// The file store serves one process: it has no claims.
func TestFileStoreHasNoClaims(t *testing.T) {
	var st Store = newFileStore(t, t.TempDir(), Config{})
	if _, ok := st.(Claimer); ok {
		t.Error("FileStore implements Claimer")
	}
}
