package snapshots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore keeps sessions and snapshots in Redis so that several
// ctxproxy replicas behind a load balancer share them. With PREFIX from
// the config and KEY the hex SHA-256 of the session id (written {KEY} on
// a Redis Cluster, a hash tag that keeps a session's keys in one slot):
//
//	PREFIX log:KEY                  the session's log: a list of records
//	PREFIX log:KEY:corrupt-TIME     corrupt records skipped in it, as they
//	                                were (a list), kept for inspection
//	PREFIX ver:KEY                  the session's version, new on every change
//	PREFIX turns:KEY                the session's turns begun and stored, on
//	                                every replica (TurnOrder)
//	PREFIX sessions                 hash KEY → Listing JSON (List)
//	PREFIX feed:NAME                a stream every replica reads (Feed):
//	                                feed:calibration carries what the
//	                                token counts learn from replies
//	PREFIX snapshot:KEY:SNAPSHOT-ID a snapshot record
//	PREFIX snapshots:KEY            hash SNAPSHOT-ID → adminapi.SnapshotInfo JSON
//	PREFIX claim:KEY:NAME           a claim on NAME in the session, held by
//	                                one replica until released or expired
//	                                (Claimer)
//	PREFIX session:KEY              a session of the format before the log,
//	                                converted by its next update
//
// A session is the same log of records as FileStore's (log.go), one list
// element per record: a turn is one RPUSH of the turn. Update is an
// optimistic transaction (WATCH the log, MULTI, EXEC, retry on conflict),
// so replicas updating one session never lose each other's changes;
// within a replica, updates of one session also take a local lock so that
// they do not fight each other. Each replica caches the decoded state of
// the sessions it used last (bounded) with the version it read, and
// replays the log only when another replica changed the session since. A
// log is compacted in the background, in the same kind of transaction,
// into one replace record. A record that fails its checks is skipped and
// the records after it are kept (logrecover.go); in the transaction that
// rewrites the log without it (the read that found it, or the next
// update) it is copied to PREFIX log:KEY:corrupt-TIME. A log without a
// record that loads is renamed to its key plus ":corrupt" by the next
// update.
//
// The store runs on a single Redis, on a primary with replicas found
// through Redis Sentinel (RedisConfig.SentinelMaster), or on a Redis
// Cluster (RedisConfig.ClusterAddrs). On the first two, a session's
// transaction also writes its entry in the index of sessions. On a
// cluster the index is in another slot, which one transaction cannot
// span: the entry is written by a command of its own right after the
// session's transaction went through (redisIndex), so a crash between
// the two leaves the listing one change behind until the session's next
// change (List skips the entry of a session deleted that way); the
// session itself is never affected.
type RedisStore struct {
	rdb       redis.UniversalClient
	keys      redisKeys
	index     redisIndex
	maxCount  int
	log       *slog.Logger
	now       func() time.Time
	obs       observer
	locks     keyLocks
	cache     *stateCache
	compactor *compactor
	counters  counters
	*redisTurns
	*redisClaims
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
	rdb := cfg.Redis.client()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("snapshots: redis %s: %w", cfg.Redis.where(), err)
	}
	return redisStoreOn(rdb, cfg, log), nil
}

// Ping reports whether Redis answers (for readiness).
func (st *RedisStore) Ping(ctx context.Context) error {
	return st.rdb.Ping(ctx).Err()
}

func redisStoreOn(rdb redis.UniversalClient, cfg Config, log *slog.Logger) *RedisStore {
	st := &RedisStore{
		rdb:      rdb,
		keys:     redisKeys{prefix: cfg.Redis.Prefix, tag: cfg.Redis.cluster()},
		maxCount: cfg.MaxCount,
		log:      log,
		now:      time.Now,
		obs:      observer{StoreRedis, cfg.Observe},
		cache:    newStateCache(defaultCacheBytes),
	}
	st.index = redisIndex{rdb: rdb, keys: st.keys, log: log, failed: &st.counters.writeErrors}
	st.redisTurns = &redisTurns{rdb: rdb, keys: st.keys, turnWait: cfg.withDefaults().Redis.TurnWait,
		readErr: st.readErr, writeErr: st.writeErr}
	st.redisClaims = &redisClaims{rdb: rdb, keys: st.keys, writeErr: st.writeErr}
	st.counters.copies = "Redis keys " + cfg.Redis.Prefix + "*:corrupt*"
	st.compactor = newCompactor(st.compact)
	return st
}

// redisKeys names a store's Redis keys under its prefix: per session
// (by its hashed key k) the record log, its version, the v1 value read
// for migration, and the snapshot index and snapshots; and the index of
// sessions. With tag (Redis Cluster) k is written {k}, a hash tag that
// puts a session's keys in one hash slot, so that one transaction and one
// WATCH can span them; without it the names are those of a single Redis.
type redisKeys struct {
	prefix string
	tag    bool
}

// id is k as it appears in the session's keys.
func (p redisKeys) id(k string) string {
	if p.tag {
		return "{" + k + "}"
	}
	return k
}

func (p redisKeys) log(k string) string       { return p.prefix + "log:" + p.id(k) }
func (p redisKeys) aside(k, t string) string  { return p.log(k) + ":corrupt-" + t }
func (p redisKeys) ver(k string) string       { return p.prefix + "ver:" + p.id(k) }
func (p redisKeys) turns(k string) string     { return p.prefix + "turns:" + p.id(k) }
func (p redisKeys) feed(name string) string   { return p.prefix + "feed:" + name }
func (p redisKeys) session(k string) string   { return p.prefix + "session:" + p.id(k) }
func (p redisKeys) index() string             { return p.prefix + "sessions" }
func (p redisKeys) snapIndex(k string) string { return p.prefix + "snapshots:" + p.id(k) }
func (p redisKeys) snap(k, snapID string) string {
	return p.prefix + "snapshot:" + p.id(k) + ":" + snapID
}
func (p redisKeys) claim(k, name string) string { return p.prefix + "claim:" + p.id(k) + ":" + name }

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

// loaded is a session as load found it.
type loaded struct {
	e   *cached // nil: no session
	ver string  // the version read ("" for none)
	// rewrite: the next write must replace the log, not append to it (a
	// session of the earlier format, or a log with corrupt records).
	rewrite bool
	// bad is the key of an unreadable session, to set aside.
	bad string
	// r is the replay, when the log had corrupt records skipped (r.lost),
	// and lost their elements as they were, to copy aside when the log
	// is rewritten (setAside).
	r    replayed
	lost []any
}

// load returns session k's state through c (the client, or a
// transaction watching the log): the cached one when the session's
// version is still the one cached, else the log replayed. An unreadable
// session is reported with an error wrapping ErrCorrupt.
func (st *RedisStore) load(ctx context.Context, c redis.Cmdable, k, id string) (loaded, error) {
	ver, err := c.Get(ctx, st.keys.ver(k)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return loaded{}, st.readErr(err)
	}
	if e := st.cache.get(k); e != nil && ver != "" && strconv.FormatInt(e.seq, 36) == ver {
		return loaded{e: e, ver: ver}, nil
	}
	recs, err := c.LRange(ctx, st.keys.log(k), 0, -1).Result()
	if err != nil {
		return loaded{}, st.readErr(err)
	}
	if len(recs) == 0 {
		return st.loadV1(ctx, c, k, id)
	}
	r := replayList(recs, id)
	if r.s == nil {
		cause := r.lost[0].cause
		st.corrupt(st.keys.log(k), cause)
		return loaded{bad: st.keys.log(k)}, fmt.Errorf("snapshots: session %q: %w", id, cause)
	}
	seq, _ := strconv.ParseInt(ver, 36, 64)
	e := &cached{k: k, s: r.s, size: int64(r.good), base: int64(r.base), seq: seq}
	l := loaded{e: e, ver: ver}
	if len(r.lost) == 0 {
		st.cache.put(e)
		return l, nil
	}
	// Not cached: until a rewrite drops them, the log holds the records.
	l.rewrite, l.r = true, r
	for _, x := range r.lost {
		l.lost = append(l.lost, recs[x.at])
	}
	return l, nil
}

// setAside copies the corrupt records l skipped to a key of their own,
// in the transaction pl that rewrites session k's log without them, and
// returns a function that reports them once it went through.
func (st *RedisStore) setAside(ctx context.Context, pl redis.Pipeliner, k string, l loaded) (done func()) {
	if len(l.lost) == 0 {
		return func() {}
	}
	aside := st.keys.aside(k, st.now().UTC().Format("20060102T150405.000000000Z"))
	pl.RPush(ctx, aside, l.lost...)
	return func() {
		reportLost(st.log, &st.counters, l.r, "key", st.keys.log(k), "record", l.r.lostAt(), "copy", aside)
	}
}

// loadV1 reads a session stored in the format before the log.
func (st *RedisStore) loadV1(ctx context.Context, c redis.Cmdable, k, id string) (loaded, error) {
	data, err := c.Get(ctx, st.keys.session(k)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return loaded{}, nil
	case err != nil:
		return loaded{}, st.readErr(err)
	}
	s, err := readSession(data, id)
	if err != nil {
		st.corrupt(st.keys.session(k), err)
		return loaded{bad: st.keys.session(k)}, fmt.Errorf("snapshots: session %q: %w", id, err)
	}
	return loaded{e: &cached{k: k, s: s}, rewrite: true}, nil
}

// Get returns session id.
func (st *RedisStore) Get(ctx context.Context, id string) (_ *Session, err error) {
	defer st.obs.done(OpGet, &err)
	if err := CheckID(id); err != nil {
		return nil, err
	}
	k := key(id)
	defer st.locks.lock(k)()
	l, err := st.load(ctx, st.rdb, k, id)
	switch {
	case err != nil:
		return nil, err
	case l.e == nil:
		return nil, ErrNotFound
	}
	if len(l.lost) > 0 {
		// Rewrite the log without its corrupt records now, so that
		// they are set aside and reported once, not on every read.
		if err := st.rewrite(ctx, k, id, true); err != nil {
			st.log.Warn("snapshots: rewrite a session log without its corrupt records; the next read tries again",
				"session", id, "err", err)
		}
	}
	st.counters.reads.Add(1)
	return l.e.s.Clone(), nil
}

// Update changes session id atomically across replicas; see Store.
func (st *RedisStore) Update(ctx context.Context, id string, fn func(*Session) error) (err error) {
	defer st.obs.done(OpUpdate, &err)
	return st.update(ctx, id, true, fn)
}

// Clear removes session id's turns and keeps its metadata; see Store.
func (st *RedisStore) Clear(ctx context.Context, id string) (err error) {
	defer st.obs.done(OpClear, &err)
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
	for attempt := 1; ; attempt++ {
		done := false
		err := st.rdb.Watch(ctx, func(tx *redis.Tx) error {
			err := st.tryUpdate(ctx, tx, id, k, create, fn)
			done = err == nil
			return err
		}, st.keys.log(k), st.keys.session(k))
		if err == nil && !done {
			// go-redis's cluster client returns nil from Watch when it
			// runs out of redirections without running the function.
			err = errSlotMoving
		}
		if !errors.Is(err, redis.TxFailedErr) && !slotMoving(err) {
			return err
		}
		if attempt == maxAttempts {
			return st.writeErr(fmt.Errorf("update %q: %d conflicting attempts: %w", id, attempt, err))
		}
		// Another replica updated the session between our read and our
		// write, or the session's slot is moving between cluster nodes:
		// back off a little, randomly, and read it again.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(rand.Int64N(int64(attempt) * int64(time.Millisecond)))):
		}
	}
}

func (st *RedisStore) tryUpdate(ctx context.Context, tx *redis.Tx, id, k string, create bool, fn func(*Session) error) error {
	l, err := st.load(ctx, tx, k, id)
	aside := errors.Is(err, ErrCorrupt) // kept for inspection; the conversation starts again
	if err != nil && !aside {
		return err
	}
	var old *Session
	if l.e != nil {
		old = l.e.s
	}
	p, err := change(old, id, create, l.rewrite, st.now().UTC(), fn)
	if err != nil {
		return err
	}
	rec := frame(p)
	replace := l.e == nil || p[0] == kindReplace
	e := l.e
	if replace {
		e = &cached{k: k}
	}
	size := e.size + int64(len(rec))
	seq := rand.Int64()
	info := Listing{}
	_, ib, _, _ := splitPayload(p)
	if err := json.Unmarshal(ib, &info); err != nil {
		return err
	}
	info.Bytes = size
	ib, _ = json.Marshal(info)
	var reported func()
	_, err = tx.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		if aside {
			pl.Rename(ctx, l.bad, l.bad+":corrupt")
		}
		reported = st.setAside(ctx, pl, k, l)
		if replace {
			pl.Del(ctx, st.keys.log(k), st.keys.session(k))
		}
		pl.RPush(ctx, st.keys.log(k), rec)
		pl.Set(ctx, st.keys.ver(k), strconv.FormatInt(seq, 36), 0)
		st.index.in(ctx, pl, k, ib)
		return nil
	})
	switch {
	case errors.Is(err, redis.TxFailedErr):
		return err
	case err != nil:
		st.cache.drop(k)
		st.log.Error("snapshots: save session", "session", id, "err", err)
		return st.writeErr(err)
	}
	st.index.after(ctx, id, k, ib)
	st.wrote(rec)
	reported()
	e.size, e.seq = size, seq
	if replace {
		e.base = size
	}
	if e.s, err = apply(e.s, id, p); err != nil {
		st.cache.drop(k)
		return fmt.Errorf("snapshots: session %q: %w", id, err)
	}
	st.cache.put(e)
	if e.needsCompaction() {
		st.compactor.request(k, id)
	}
	return nil
}

// errSlotMoving is an update that did not run because the session's hash
// slot is moving between the nodes of a cluster.
var errSlotMoving = errors.New("the session's hash slot is moving between cluster nodes")

// slotMoving reports whether err says that a key's hash slot is moving
// between the nodes of a cluster, while redis-cli --cluster reshard or
// rebalance migrates it: WATCH, and a transaction on one node, follow no
// ASK redirection, and multi-key commands get TRYAGAIN while the slot's
// keys are split between the nodes. The update is tried again.
func slotMoving(err error) bool {
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask || redis.IsTryAgainError(err) || errors.Is(err, errSlotMoving)
}

// compact replaces session id's log with one replace record of its
// state, unless another replica changed it meanwhile (then the next
// update asks again). The version stays: the state is the same.
func (st *RedisStore) compact(k, id string) {
	var err error
	defer st.obs.done(OpCompact, &err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer st.locks.lock(k)()
	if err = st.rewrite(ctx, k, id, false); err != nil {
		st.log.Warn("snapshots: compact a session log", "session", id, "err", err)
	}
}

// rewrite replaces session id's log with one replace record of its state
// when the log holds corrupt records (which it sets aside) or, unless
// repairOnly, when it is due for compaction; a conflict with another
// replica's change is no error (the log is read again by whoever needs
// it). The caller holds k's lock.
func (st *RedisStore) rewrite(ctx context.Context, k, id string, repairOnly bool) error {
	err := st.rdb.Watch(ctx, func(tx *redis.Tx) error {
		l, err := st.load(ctx, tx, k, id)
		if err != nil || l.e == nil {
			return err
		}
		if len(l.lost) == 0 && (repairOnly || l.rewrite || !l.e.needsCompaction()) {
			return nil
		}
		p, err := encodeReplace(l.e.s)
		if err != nil {
			return err
		}
		rec := frame(p)
		info := l.e.s.Info()
		info.Bytes = int64(len(rec))
		ib, err := json.Marshal(info)
		if err != nil {
			return err
		}
		var reported func()
		_, err = tx.TxPipelined(ctx, func(pl redis.Pipeliner) error {
			reported = st.setAside(ctx, pl, k, l)
			pl.Del(ctx, st.keys.log(k))
			pl.RPush(ctx, st.keys.log(k), rec)
			st.index.in(ctx, pl, k, ib)
			return nil
		})
		if err == nil {
			st.index.after(ctx, id, k, ib)
			st.wrote(rec)
			reported()
			l.e.size, l.e.base = int64(len(rec)), int64(len(rec))
			st.cache.put(l.e)
		}
		return err
	}, st.keys.log(k))
	if errors.Is(err, redis.TxFailedErr) {
		err = nil
	}
	return err
}

// List returns every session, most recently updated first.
func (st *RedisStore) List(ctx context.Context) (out []Listing, err error) {
	defer st.obs.done(OpList, &err)
	all, err := st.rdb.HGetAll(ctx, st.keys.index()).Result()
	if err != nil {
		return nil, st.readErr(err)
	}
	out = make([]Listing, 0, len(all))
	keys := make([]string, 0, len(all))
	for k, v := range all {
		var info Listing
		if err := json.Unmarshal([]byte(v), &info); err != nil || key(info.SessionID) != k {
			st.corrupt(st.keys.index()+" "+k, fmt.Errorf("%w: index entry", ErrCorrupt))
			continue
		}
		out = append(out, info)
		keys = append(keys, k)
	}
	// On a cluster the pipeline goes to each node with the keys it holds.
	snapCmds := make([]*redis.StringSliceCmd, len(keys))
	exist := make([]*redis.IntCmd, len(keys))
	_, err = st.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			snapCmds[i] = p.HVals(ctx, st.keys.snapIndex(k))
			if st.keys.tag {
				exist[i] = p.Exists(ctx, st.keys.log(k), st.keys.session(k))
			}
		}
		return nil
	})
	if err != nil {
		return nil, st.readErr(err)
	}
	kept := out[:0]
	for i, info := range out {
		if st.keys.tag && exist[i].Val() == 0 {
			// The entry of a session deleted by a replica that died
			// before it removed the entry (redisIndex.after).
			continue
		}
		snaps := snapCmds[i].Val()
		info.Snapshots = len(snaps)
		for _, v := range snaps {
			var snap struct{ Bytes int64 }
			if json.Unmarshal([]byte(v), &snap) == nil {
				info.Bytes += snap.Bytes
			}
		}
		kept = append(kept, info)
	}
	out = kept
	sortSessions(out)
	return out, nil
}

// Delete removes session id and its snapshots.
func (st *RedisStore) Delete(ctx context.Context, id string) (err error) {
	defer st.obs.done(OpDelete, &err)
	if err := CheckID(id); err != nil {
		return err
	}
	k := key(id)
	defer st.locks.lock(k)()
	st.cache.drop(k)
	snapIDs, err := st.rdb.HKeys(ctx, st.keys.snapIndex(k)).Result()
	if err != nil {
		return st.readErr(err)
	}
	var del *redis.IntCmd
	_, err = st.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		del = p.Del(ctx, st.keys.log(k), st.keys.session(k))
		p.Del(ctx, st.keys.ver(k))
		st.index.in(ctx, p, k, nil)
		p.Del(ctx, st.keys.snapIndex(k))
		for _, snapID := range snapIDs {
			p.Del(ctx, st.keys.snap(k, snapID))
		}
		return nil
	})
	if err != nil {
		return st.writeErr(err)
	}
	st.index.after(ctx, id, k, nil)
	if del.Val() == 0 && len(snapIDs) == 0 {
		return ErrNotFound
	}
	return nil
}

// Counters returns the store's running totals.
func (st *RedisStore) Counters() Counters { return st.counters.get() }

// Close stops the background compaction and closes the connection pool.
func (st *RedisStore) Close() error {
	st.compactor.close()
	return st.rdb.Close()
}
