package snapshots

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// Feed is a log in Redis that every replica sharing a RedisStore reads in
// one order (a Redis stream, PREFIX feed:NAME): what any replica appends,
// each one applies, itself included, so that what replicas learn from
// traffic is the same on every one. It keeps the latest feedMaxLen
// entries, about; a replica that starts reads those first.
type Feed struct {
	rdb redis.UniversalClient
	key string
	log *slog.Logger
}

// feedMaxLen is about how many entries a Feed keeps.
const feedMaxLen = 10000

// feedBlock is how long one read of a Feed waits for new entries.
const feedBlock = time.Second

// NewFeed returns the feed called name on st's Redis.
func NewFeed(st *RedisStore, name string) *Feed {
	return &Feed{rdb: st.rdb, key: st.keys.feed(name), log: st.log}
}

// Append adds data to the end of f.
func (f *Feed) Append(ctx context.Context, data []byte) error {
	err := f.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.key, MaxLen: feedMaxLen, Approx: true, Values: []any{"d", data}}).Err()
	if err != nil {
		return fmt.Errorf("snapshots: redis: append to %s: %w", f.key, err)
	}
	return nil
}

// Follow calls apply with each entry of f in order, from the oldest kept,
// until ctx is done. A failed read is logged and tried again, a second
// later at most; entries appended meanwhile are read then.
func (f *Feed) Follow(ctx context.Context, apply func([]byte)) {
	last, failing := "0", false
	for ctx.Err() == nil {
		res, err := f.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{f.key, last}, Count: 1024, Block: feedBlock}).Result()
		switch {
		case errors.Is(err, redis.Nil): // nothing new within feedBlock
			continue
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			if !failing {
				f.log.Warn("snapshots: reading a shared feed failed; trying again", "key", f.key, "err", err)
			}
			failing = true
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		if failing {
			f.log.Info("snapshots: reading a shared feed again", "key", f.key)
			failing = false
		}
		for _, s := range res {
			for _, m := range s.Messages {
				last = m.ID
				if d, ok := m.Values["d"].(string); ok {
					apply([]byte(d))
				}
			}
		}
	}
}
