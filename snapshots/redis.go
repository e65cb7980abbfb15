package snapshots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore keeps sessions and snapshots in Redis so that several
// ctxproxy replicas behind a load balancer share them. With PREFIX from
// the config and KEY the hex SHA-256 of the session id:
//
//	PREFIX session:KEY              the session record
//	PREFIX sessions                 hash KEY → SessionInfo JSON (List)
//	PREFIX snapshot:KEY:SNAPSHOT-ID a snapshot record
//	PREFIX snapshots:KEY            hash SNAPSHOT-ID → SnapshotInfo JSON
//
// Records are the same gzip-compressed, checksummed JSON as FileStore's
// files. Update is an optimistic transaction (WATCH the session, MULTI,
// EXEC, retry on conflict), so replicas updating one session never lose
// each other's changes; within a replica, updates of one session also take
// a local lock so that they do not fight each other. A record that fails
// its checks is copied to its key plus ":corrupt" and skipped. Transactions
// span a session's key and the shared index, so the store needs a single
// Redis (or a primary with replicas), not Redis Cluster.
type RedisStore struct {
	rdb      *redis.Client
	prefix   string
	maxCount int
	log      *slog.Logger
	now      func() time.Time
	locks    keyLocks
	counters counters
}

// maxAttempts bounds the optimistic retries of one update. Each conflict
// means another replica's update went through, so running out takes that
// many competing writes to one session within one update's time.
const maxAttempts = 100

// NewRedisStore connects to the Redis in cfg.Redis and checks that it
// answers.
func NewRedisStore(ctx context.Context, cfg Config, log *slog.Logger) (*RedisStore, error) {
	cfg = cfg.withDefaults()
	if log == nil {
		log = discard
	}
	rdb := redis.NewClient(&redis.Options{
		Addr:     cfg.Redis.Addr,
		Password: cfg.Redis.Password,
		DB:       cfg.Redis.DB,
	})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("snapshots: redis %s: %w", cfg.Redis.Addr, err)
	}
	return redisStoreOn(rdb, cfg, log), nil
}

// Ping reports whether Redis answers (for readiness).
func (st *RedisStore) Ping(ctx context.Context) error {
	return st.rdb.Ping(ctx).Err()
}

func redisStoreOn(rdb *redis.Client, cfg Config, log *slog.Logger) *RedisStore {
	return &RedisStore{
		rdb:      rdb,
		prefix:   cfg.Redis.Prefix,
		maxCount: cfg.MaxCount,
		log:      log,
		now:      time.Now,
	}
}

func (st *RedisStore) sessionKey(k string) string   { return st.prefix + "session:" + k }
func (st *RedisStore) indexKey() string             { return st.prefix + "sessions" }
func (st *RedisStore) snapIndexKey(k string) string { return st.prefix + "snapshots:" + k }
func (st *RedisStore) snapKey(k, snapID string) string {
	return st.prefix + "snapshot:" + k + ":" + snapID
}

func (st *RedisStore) readErr(err error) error {
	st.counters.readErrors.Add(1)
	return fmt.Errorf("snapshots: redis: %w", err)
}

func (st *RedisStore) writeErr(err error) error {
	st.counters.writeErrors.Add(1)
	return fmt.Errorf("snapshots: redis: %w", err)
}

func (st *RedisStore) wrote(data []byte) {
	st.counters.writes.Add(1)
	st.counters.writeBytes.Add(uint64(len(data)))
}

// corrupt reports a record that failed its checks.
func (st *RedisStore) corrupt(rkey string, cause error) {
	st.counters.corrupt.Add(1)
	st.log.Error("snapshots: corrupt record set aside; everything else still loads", "key", rkey, "err", cause)
}

// Get returns session id.
func (st *RedisStore) Get(ctx context.Context, id string) (*Session, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	rkey := st.sessionKey(key(id))
	data, err := st.rdb.Get(ctx, rkey).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, ErrNotFound
	case err != nil:
		return nil, st.readErr(err)
	}
	st.counters.reads.Add(1)
	s, err := readSession(data, id)
	if err != nil {
		st.corrupt(rkey, err)
		return nil, fmt.Errorf("snapshots: session %q: %w", id, err)
	}
	return s, nil
}

// Update changes session id atomically across replicas; see Store.
func (st *RedisStore) Update(ctx context.Context, id string, fn func(*Session) error) error {
	return st.update(ctx, id, true, fn)
}

// Clear removes session id's turns and keeps its metadata; see Store.
func (st *RedisStore) Clear(ctx context.Context, id string) error {
	return st.update(ctx, id, false, func(s *Session) error {
		s.clear()
		return nil
	})
}

func (st *RedisStore) update(ctx context.Context, id string, create bool, fn func(*Session) error) error {
	if err := CheckID(id); err != nil {
		return err
	}
	k := key(id)
	defer st.locks.lock(k)()
	rkey := st.sessionKey(k)
	for attempt := 1; ; attempt++ {
		err := st.rdb.Watch(ctx, func(tx *redis.Tx) error {
			return st.tryUpdate(ctx, tx, id, k, create, fn)
		}, rkey)
		if !errors.Is(err, redis.TxFailedErr) {
			return err
		}
		if attempt == maxAttempts {
			return st.writeErr(fmt.Errorf("update %q: %d conflicting attempts: %w", id, attempt, err))
		}
		// Another replica updated the session between our read and our
		// write: back off a little, randomly, and read it again.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(rand.Int64N(int64(attempt) * int64(time.Millisecond)))):
		}
	}
}

func (st *RedisStore) tryUpdate(ctx context.Context, tx *redis.Tx, id, k string, create bool, fn func(*Session) error) error {
	rkey := st.sessionKey(k)
	now := st.now().UTC()
	data, err := tx.Get(ctx, rkey).Bytes()
	var s *Session
	var bad []byte
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return st.readErr(err)
	default:
		st.counters.reads.Add(1)
		if s, err = readSession(data, id); err != nil {
			st.corrupt(rkey, err)
			bad, s = data, nil
		}
	}
	rec, info, err := change(s, id, create, now, fn)
	if err != nil {
		return err
	}
	ib, err := json.Marshal(info)
	if err != nil {
		return err
	}
	_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if bad != nil {
			p.Set(ctx, rkey+":corrupt", bad, 0)
		}
		p.Set(ctx, rkey, rec, 0)
		p.HSet(ctx, st.indexKey(), k, ib)
		return nil
	})
	switch {
	case errors.Is(err, redis.TxFailedErr):
		return err
	case err != nil:
		st.log.Error("snapshots: save session", "session", id, "err", err)
		return st.writeErr(err)
	}
	st.wrote(rec)
	return nil
}

// List returns every session, most recently updated first.
func (st *RedisStore) List(ctx context.Context) ([]SessionInfo, error) {
	all, err := st.rdb.HGetAll(ctx, st.indexKey()).Result()
	if err != nil {
		return nil, st.readErr(err)
	}
	out := make([]SessionInfo, 0, len(all))
	keys := make([]string, 0, len(all))
	for k, v := range all {
		var info SessionInfo
		if err := json.Unmarshal([]byte(v), &info); err != nil || key(info.ID) != k {
			st.corrupt(st.indexKey()+" "+k, fmt.Errorf("%w: index entry", ErrCorrupt))
			continue
		}
		out = append(out, info)
		keys = append(keys, k)
	}
	cmds, err := st.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.HLen(ctx, st.snapIndexKey(k))
		}
		return nil
	})
	if err != nil {
		return nil, st.readErr(err)
	}
	for i, c := range cmds {
		out[i].Snapshots = int(c.(*redis.IntCmd).Val())
	}
	sortSessions(out)
	return out, nil
}

// Delete removes session id and its snapshots.
func (st *RedisStore) Delete(ctx context.Context, id string) error {
	if err := CheckID(id); err != nil {
		return err
	}
	k := key(id)
	defer st.locks.lock(k)()
	snapIDs, err := st.rdb.HKeys(ctx, st.snapIndexKey(k)).Result()
	if err != nil {
		return st.readErr(err)
	}
	var del *redis.IntCmd
	_, err = st.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		del = p.Del(ctx, st.sessionKey(k))
		p.HDel(ctx, st.indexKey(), k)
		p.Del(ctx, st.snapIndexKey(k))
		for _, snapID := range snapIDs {
			p.Del(ctx, st.snapKey(k, snapID))
		}
		return nil
	})
	if err != nil {
		return st.writeErr(err)
	}
	if del.Val() == 0 && len(snapIDs) == 0 {
		return ErrNotFound
	}
	return nil
}

// SaveSnapshot stores snap and applies the retention limit; see Store.
func (st *RedisStore) SaveSnapshot(ctx context.Context, snap *Snapshot) (SnapshotInfo, error) {
	if err := CheckID(snap.SessionID); err != nil {
		return SnapshotInfo{}, err
	}
	if snap.ID != "" {
		if err := checkSnapID(snap.ID); err != nil {
			return SnapshotInfo{}, err
		}
	}
	k := key(snap.SessionID)
	s := *snap
	if s.Created.IsZero() {
		s.Created = st.now()
	}
	s.Created = s.Created.UTC()
	for s.ID == "" {
		s.ID = newSnapID(s.Created)
		taken, err := st.rdb.HExists(ctx, st.snapIndexKey(k), s.ID).Result()
		if err != nil {
			return SnapshotInfo{}, st.readErr(err)
		}
		if taken {
			s.ID = ""
		}
	}
	rec, info, err := snapshotRecord(&s)
	if err != nil {
		return SnapshotInfo{}, err
	}
	ib, err := json.Marshal(info)
	if err != nil {
		return SnapshotInfo{}, err
	}
	_, err = st.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, st.snapKey(k, s.ID), rec, 0)
		p.HSet(ctx, st.snapIndexKey(k), s.ID, ib)
		return nil
	})
	if err != nil {
		st.log.Error("snapshots: save snapshot", "session", s.SessionID, "err", err)
		return SnapshotInfo{}, st.writeErr(err)
	}
	st.wrote(rec)
	if err := st.prune(ctx, k); err != nil {
		st.log.Warn("snapshots: delete old snapshots", "session", s.SessionID, "err", err)
	}
	return info, nil
}

// prune deletes session k's oldest snapshots beyond the retention limit.
// Replicas pruning at once pick the same oldest ones, so deleting twice
// is harmless.
func (st *RedisStore) prune(ctx context.Context, k string) error {
	infos, err := st.snapInfos(ctx, k)
	if err != nil || len(infos) <= st.maxCount {
		return err
	}
	_, err = st.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, info := range infos[st.maxCount:] {
			p.Del(ctx, st.snapKey(k, info.ID))
			p.HDel(ctx, st.snapIndexKey(k), info.ID)
		}
		return nil
	})
	if err != nil {
		return st.writeErr(err)
	}
	return nil
}

// snapInfos returns session k's snapshot index, newest first, skipping
// entries that do not decode.
func (st *RedisStore) snapInfos(ctx context.Context, k string) ([]SnapshotInfo, error) {
	all, err := st.rdb.HGetAll(ctx, st.snapIndexKey(k)).Result()
	if err != nil {
		return nil, st.readErr(err)
	}
	m := make(map[string]SnapshotInfo, len(all))
	for snapID, v := range all {
		var info SnapshotInfo
		if err := json.Unmarshal([]byte(v), &info); err != nil || info.ID != snapID {
			st.corrupt(st.snapIndexKey(k)+" "+snapID, fmt.Errorf("%w: index entry", ErrCorrupt))
			continue
		}
		m[snapID] = info
	}
	return sortedSnaps(m), nil
}

// ListSnapshots returns session id's snapshots newest first.
func (st *RedisStore) ListSnapshots(ctx context.Context, id string) ([]SnapshotInfo, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	return st.snapInfos(ctx, key(id))
}

// LoadSnapshot returns snapshot snapID of session id.
func (st *RedisStore) LoadSnapshot(ctx context.Context, id, snapID string) (*Snapshot, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	if err := checkSnapID(snapID); err != nil {
		return nil, err
	}
	k := key(id)
	rkey := st.snapKey(k, snapID)
	data, err := st.rdb.Get(ctx, rkey).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, ErrNotFound
	case err != nil:
		return nil, st.readErr(err)
	}
	st.counters.reads.Add(1)
	snap, err := readSnapshot(data, id, snapID)
	if err != nil {
		st.corrupt(rkey, err)
		// Set it aside: keep the bytes for inspection, drop it from the
		// listing.
		st.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Rename(ctx, rkey, rkey+":corrupt")
			p.HDel(ctx, st.snapIndexKey(k), snapID)
			return nil
		})
		return nil, fmt.Errorf("snapshots: snapshot %s of %q: %w", snapID, id, err)
	}
	return snap, nil
}

// DeleteSnapshot removes a snapshot and its index entry.
func (st *RedisStore) DeleteSnapshot(ctx context.Context, id, snapID string) error {
	if err := CheckID(id); err != nil {
		return err
	}
	if err := checkSnapID(snapID); err != nil {
		return err
	}
	k := key(id)
	var del, hdel *redis.IntCmd
	_, err := st.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		del = p.Del(ctx, st.snapKey(k, snapID))
		hdel = p.HDel(ctx, st.snapIndexKey(k), snapID)
		return nil
	})
	if err != nil {
		return st.writeErr(err)
	}
	if del.Val() == 0 && hdel.Val() == 0 {
		return ErrNotFound
	}
	return nil
}

// Counters returns the store's running totals.
func (st *RedisStore) Counters() Counters { return st.counters.get() }

// Close closes the connection pool.
func (st *RedisStore) Close() error { return st.rdb.Close() }
