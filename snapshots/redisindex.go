package snapshots

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// redisIndex writes a RedisStore's index of sessions (PREFIX sessions):
// on a single Redis (or behind Sentinel) in the transaction that changes
// the session, on a cluster right after it, because the index is in a
// hash slot of its own, which the session's transaction cannot span.
type redisIndex struct {
	rdb  redis.UniversalClient
	keys redisKeys
	log  *slog.Logger
	// failed counts the writes after a transaction that failed.
	failed *atomic.Uint64
}

// in writes session k's entry (ib; nil deletes it) in the transaction pl
// that changes the session, except on a cluster (after writes it there).
func (x redisIndex) in(ctx context.Context, pl redis.Pipeliner, k string, ib []byte) {
	if !x.keys.tag {
		x.write(ctx, pl, k, ib)
	}
}

// after writes session id's entry on a cluster, once the session's
// transaction went through. A failure (or a crash before it) leaves the
// entry one change behind, or a deleted session's entry in place, until
// the session's next change; the session itself is stored. It is logged,
// and counted as a failed write.
func (x redisIndex) after(ctx context.Context, id, k string, ib []byte) {
	if !x.keys.tag {
		return
	}
	if err := x.write(context.WithoutCancel(ctx), x.rdb, k, ib).Err(); err != nil {
		x.failed.Add(1)
		x.log.Warn("snapshots: the session is stored, its entry in the list of sessions is not; its next change writes it",
			"session", id, "err", err)
	}
}

func (x redisIndex) write(ctx context.Context, c redis.Cmdable, k string, ib []byte) *redis.IntCmd {
	if ib == nil {
		return c.HDel(ctx, x.keys.index(), k)
	}
	return c.HSet(ctx, x.keys.index(), k, ib)
}
