package proxy

import (
	"time"

	"github.com/ctxproxy/ctxproxy/internal/cache"
)

// maxTrackedSessions bounds the sessions whose last usage is remembered:
// session ids are client data.
const maxTrackedSessions = 100000

// usageCache remembers each session's last usage and when it was seen,
// to notice when usage crosses a threshold and which sessions are active.
// The least recently seen sessions are forgotten first.
type usageCache struct {
	lru *cache.LRU[string, usageEntry]
}

type usageEntry struct {
	usage float64
	seen  time.Time
}

func newUsageCache() *usageCache {
	return &usageCache{lru: cache.New[string, usageEntry](maxTrackedSessions)}
}

// swap stores usage for id and returns the previous value.
func (u *usageCache) swap(id string, usage float64) (prev float64, seen bool) {
	e, seen := u.lru.Swap(id, usageEntry{usage: usage, seen: time.Now()})
	return e.usage, seen
}

// active lists the sessions seen within d.
func (u *usageCache) active(d time.Duration) []string {
	var out []string
	for id, e := range u.lru.All() {
		if time.Since(e.seen) < d {
			out = append(out, id)
		}
	}
	return out
}
