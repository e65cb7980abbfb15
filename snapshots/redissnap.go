package snapshots

// RedisStore's snapshots: one gzip-compressed record per key, indexed in a
// hash per session.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/redis/go-redis/v9"
)

// SaveSnapshot stores snap and applies the retention limit; see Store.
func (st *RedisStore) SaveSnapshot(ctx context.Context, snap *Snapshot) (_ adminapi.SnapshotInfo, err error) {
	defer st.obs.done(OpSaveSnapshot, &err)
	if err := CheckID(snap.SessionID); err != nil {
		return adminapi.SnapshotInfo{}, err
	}
	if snap.ID != "" {
		if err := checkSnapID(snap.ID); err != nil {
			return adminapi.SnapshotInfo{}, err
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
		taken, err := st.rdb.HExists(ctx, st.keys.snapIndex(k), s.ID).Result()
		if err != nil {
			return adminapi.SnapshotInfo{}, st.readErr(err)
		}
		if taken {
			s.ID = ""
		}
	}
	rec, info, err := snapshotRecord(&s)
	if err != nil {
		return adminapi.SnapshotInfo{}, err
	}
	ib, err := json.Marshal(info)
	if err != nil {
		return adminapi.SnapshotInfo{}, err
	}
	_, err = st.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, st.keys.snap(k, s.ID), rec, 0)
		p.HSet(ctx, st.keys.snapIndex(k), s.ID, ib)
		return nil
	})
	if err != nil {
		st.log.Error("snapshots: save snapshot", "session", s.SessionID, "err", err)
		return adminapi.SnapshotInfo{}, st.writeErr(err)
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
			p.Del(ctx, st.keys.snap(k, info.ID))
			p.HDel(ctx, st.keys.snapIndex(k), info.ID)
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
func (st *RedisStore) snapInfos(ctx context.Context, k string) ([]adminapi.SnapshotInfo, error) {
	all, err := st.rdb.HGetAll(ctx, st.keys.snapIndex(k)).Result()
	if err != nil {
		return nil, st.readErr(err)
	}
	m := make(map[string]adminapi.SnapshotInfo, len(all))
	for snapID, v := range all {
		var info adminapi.SnapshotInfo
		if err := json.Unmarshal([]byte(v), &info); err != nil || info.ID != snapID {
			st.corrupt(st.keys.snapIndex(k)+" "+snapID, fmt.Errorf("%w: index entry", ErrCorrupt))
			continue
		}
		m[snapID] = info
	}
	return sortedSnaps(m), nil
}

// ListSnapshots returns session id's snapshots newest first.
func (st *RedisStore) ListSnapshots(ctx context.Context, id string) (_ []adminapi.SnapshotInfo, err error) {
	defer st.obs.done(OpListSnapshots, &err)
	if err := CheckID(id); err != nil {
		return nil, err
	}
	return st.snapInfos(ctx, key(id))
}

// LoadSnapshot returns snapshot snapID of session id.
func (st *RedisStore) LoadSnapshot(ctx context.Context, id, snapID string) (_ *Snapshot, err error) {
	defer st.obs.done(OpLoadSnapshot, &err)
	if err := CheckID(id); err != nil {
		return nil, err
	}
	if err := checkSnapID(snapID); err != nil {
		return nil, err
	}
	k := key(id)
	rkey := st.keys.snap(k, snapID)
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
			p.HDel(ctx, st.keys.snapIndex(k), snapID)
			return nil
		})
		return nil, fmt.Errorf("snapshots: snapshot %s of %q: %w", snapID, id, err)
	}
	return snap, nil
}

// DeleteSnapshot removes a snapshot and its index entry.
func (st *RedisStore) DeleteSnapshot(ctx context.Context, id, snapID string) (err error) {
	defer st.obs.done(OpDeleteSnapshot, &err)
	if err := CheckID(id); err != nil {
		return err
	}
	if err := checkSnapID(snapID); err != nil {
		return err
	}
	k := key(id)
	var del, hdel *redis.IntCmd
	_, err = st.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		del = p.Del(ctx, st.keys.snap(k, snapID))
		hdel = p.HDel(ctx, st.keys.snapIndex(k), snapID)
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
