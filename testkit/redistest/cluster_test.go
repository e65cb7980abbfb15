package redistest

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestStartCluster: the three nodes form one cluster, and keys spread
// over all three primaries.
func TestStartCluster(t *testing.T) {
	addrs := StartCluster(t)
	if len(addrs) != 3 {
		t.Fatalf("StartCluster returned %d addresses, want 3", len(addrs))
	}
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer rdb.Close()
	for i := range 60 {
		if err := rdb.Set(ctx, "key"+strconv.Itoa(i), "v", 0).Err(); err != nil {
			t.Fatalf("SET: %v", err)
		}
	}
	var mu sync.Mutex
	sizes := map[string]int64{}
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		n, err := c.DBSize(ctx).Result()
		mu.Lock()
		sizes[c.Options().Addr] = n
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sizes) != 3 {
		t.Fatalf("%d primaries, want 3: %v", len(sizes), sizes)
	}
	for addr, n := range sizes {
		if n == 0 {
			t.Errorf("primary %s holds none of 60 keys: %v", addr, sizes)
		}
	}
}
