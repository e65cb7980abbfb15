package snapshots

// FileStore's snapshots: one gzip-compressed record per file, replaced
// atomically, indexed in memory.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

func (st *FileStore) indexSnapshot(k, snapID string) {
	path := st.snapshotPath(k, snapID)
	data, err := st.files.read(path)
	if err != nil {
		st.log.Error("snapshots: read snapshot", "path", path, "err", err)
		return
	}
	info, err := readInfo[adminapi.SnapshotInfo](data, formatSnapshot)
	if err == nil && (info.ID != snapID || key(info.SessionID) != k) {
		err = fmt.Errorf("%w: record holds another snapshot", ErrCorrupt)
	}
	if err != nil {
		st.files.setAside(path, err)
		return
	}
	info.Bytes = len(data)
	st.mu.Lock()
	st.addSnap(k, info)
	st.mu.Unlock()
}

// addSnap indexes a snapshot; st.mu must be held.
func (st *FileStore) addSnap(k string, info adminapi.SnapshotInfo) {
	m := st.snaps[k]
	if m == nil {
		m = make(map[string]adminapi.SnapshotInfo)
		st.snaps[k] = m
	}
	m[info.ID] = info
}

// dropSnap removes a snapshot from the index; st.mu must be held.
func (st *FileStore) dropSnap(k, snapID string) {
	delete(st.snaps[k], snapID)
	if len(st.snaps[k]) == 0 {
		delete(st.snaps, k)
	}
}

func (st *FileStore) snapshotPath(k, snapID string) string {
	return filepath.Join(st.snapDir, k, snapID+fileExt)
}

// SaveSnapshot stores snap and applies the retention limit; see Store.
func (st *FileStore) SaveSnapshot(ctx context.Context, snap *Snapshot) (_ adminapi.SnapshotInfo, err error) {
	defer st.obs.done(OpSaveSnapshot, &err)
	if err := CheckID(snap.SessionID); err != nil {
		return adminapi.SnapshotInfo{}, err
	}
	if snap.ID != "" {
		if err := checkSnapID(snap.ID); err != nil {
			return adminapi.SnapshotInfo{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return adminapi.SnapshotInfo{}, err
	}
	k := key(snap.SessionID)
	defer st.snapLocks.lock(k)()
	s := *snap
	if s.Created.IsZero() {
		s.Created = st.now()
	}
	s.Created = s.Created.UTC()
	if s.ID == "" {
		st.mu.RLock()
		for s.ID == "" || st.snaps[k][s.ID].ID != "" {
			s.ID = newSnapID(s.Created)
		}
		st.mu.RUnlock()
	}
	data, info, err := snapshotRecord(&s)
	if err != nil {
		return adminapi.SnapshotInfo{}, err
	}
	dir := filepath.Join(st.snapDir, k)
	switch err := os.Mkdir(dir, privateDir); {
	case err == nil:
		st.files.syncDir(st.snapDir)
	case !errors.Is(err, fs.ErrExist):
		st.counters.writeErrors.Add(1)
		err = fmt.Errorf("snapshots: %w", err)
		st.log.Error("snapshots: save snapshot", "session", s.SessionID, "err", err)
		return adminapi.SnapshotInfo{}, err
	}
	if _, err := st.files.write(dir, s.ID+fileExt, data); err != nil {
		st.log.Error("snapshots: save snapshot", "session", s.SessionID, "err", err)
		return adminapi.SnapshotInfo{}, err
	}
	st.mu.Lock()
	st.addSnap(k, info)
	st.mu.Unlock()
	st.prune(k)
	return info, nil
}

// prune deletes session k's oldest snapshots beyond the retention limit.
func (st *FileStore) prune(k string) {
	st.mu.Lock()
	infos := sortedSnaps(st.snaps[k])
	var old []adminapi.SnapshotInfo
	if len(infos) > st.maxCount {
		old = infos[st.maxCount:]
		for _, info := range old {
			st.dropSnap(k, info.ID)
		}
	}
	st.mu.Unlock()
	if len(old) == 0 {
		return
	}
	for _, info := range old {
		if err := os.Remove(st.snapshotPath(k, info.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			st.log.Warn("snapshots: delete old snapshot", "session", info.SessionID, "snapshot", info.ID, "err", err)
		}
	}
	st.files.syncDir(filepath.Join(st.snapDir, k))
}

// sortedSnaps returns the infos newest first.
func sortedSnaps(m map[string]adminapi.SnapshotInfo) []adminapi.SnapshotInfo {
	out := make([]adminapi.SnapshotInfo, 0, len(m))
	for _, info := range m {
		out = append(out, info)
	}
	slices.SortFunc(out, newer)
	return out
}

// ListSnapshots returns session id's snapshots newest first.
func (st *FileStore) ListSnapshots(ctx context.Context, id string) (_ []adminapi.SnapshotInfo, err error) {
	defer st.obs.done(OpListSnapshots, &err)
	if err := CheckID(id); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st.mu.RLock()
	defer st.mu.RUnlock()
	return sortedSnaps(st.snaps[key(id)]), nil
}

// LoadSnapshot returns snapshot snapID of session id.
func (st *FileStore) LoadSnapshot(ctx context.Context, id, snapID string) (_ *Snapshot, err error) {
	defer st.obs.done(OpLoadSnapshot, &err)
	if err := CheckID(id); err != nil {
		return nil, err
	}
	if err := checkSnapID(snapID); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k := key(id)
	path := st.snapshotPath(k, snapID)
	data, err := st.files.read(path)
	if err != nil {
		return nil, err
	}
	snap, err := readSnapshot(data, id, snapID)
	if err != nil {
		unlock := st.snapLocks.lock(k)
		if data, rerr := st.files.read(path); rerr == nil {
			if _, rerr := readSnapshot(data, id, snapID); rerr != nil {
				st.files.setAside(path, rerr)
				st.mu.Lock()
				st.dropSnap(k, snapID)
				st.mu.Unlock()
			}
		}
		unlock()
		return nil, fmt.Errorf("snapshots: snapshot %s of %q: %w", snapID, id, err)
	}
	return snap, nil
}

// DeleteSnapshot removes a snapshot file and its index entry.
func (st *FileStore) DeleteSnapshot(ctx context.Context, id, snapID string) (err error) {
	defer st.obs.done(OpDeleteSnapshot, &err)
	if err := CheckID(id); err != nil {
		return err
	}
	if err := checkSnapID(snapID); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	k := key(id)
	defer st.snapLocks.lock(k)()
	err = os.Remove(st.snapshotPath(k, snapID))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		st.counters.writeErrors.Add(1)
		return fmt.Errorf("snapshots: delete snapshot %s of %q: %w", snapID, id, err)
	}
	st.mu.Lock()
	st.dropSnap(k, snapID)
	st.mu.Unlock()
	if err != nil {
		return ErrNotFound
	}
	st.files.syncDir(filepath.Join(st.snapDir, k))
	return nil
}
