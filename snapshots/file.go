package snapshots

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// FileStore keeps sessions and snapshots in files under a directory:
//
//	DIR/sessions/KEY.json.gz
//	DIR/snapshots/KEY/SNAPSHOT-ID.json.gz
//
// where KEY is the hex SHA-256 of the session id. Every file is replaced
// atomically (seed 004 4.2, 10.2): written to a temporary file in the same
// directory, fsynced, renamed over the old one, and the directory fsynced,
// so a crash at any moment leaves the old version or the new one, never a
// mix. Listings come from an in-memory index (seed 004 10.4) built when the
// store opens by reading and checking every file.
//
// A file that fails its checks is logged, counted, renamed to NAME.corrupt
// (kept for inspection, never read again) and treated as absent; every
// other file keeps loading (seed 004 10.3, 10.6).
//
// One process owns a directory; several replicas need RedisStore.
type FileStore struct {
	sessDir  string
	snapDir  string
	maxCount int
	log      *slog.Logger
	now      func() time.Time
	// createTemp makes the temporary file a write goes to; tests swap it
	// to inject write failures (a full disk).
	createTemp func(dir, pattern string) (tempFile, error)

	sessLocks keyLocks
	snapLocks keyLocks

	mu       sync.RWMutex
	sessions map[string]SessionInfo             // by key
	snaps    map[string]map[string]SnapshotInfo // by key, then snapshot id

	counters counters
}

type tempFile interface {
	Write(p []byte) (int, error)
	Sync() error
	Close() error
	Name() string
}

const (
	fileExt     = ".json.gz"
	tempPrefix  = ".tmp-"
	corruptExt  = ".corrupt"
	privateDir  = 0o700 // conversations are private: owner only
	sessionsDir = "sessions"
	snapsDir    = "snapshots"
)

// NewFileStore opens (creating it if needed) the file store in cfg.Dir and
// builds its index. Leftover temporary files of an interrupted write are
// removed; corrupt files are set aside.
func NewFileStore(cfg Config, log *slog.Logger) (*FileStore, error) {
	cfg = cfg.withDefaults()
	if log == nil {
		log = discard
	}
	st := &FileStore{
		sessDir:  filepath.Join(cfg.Dir, sessionsDir),
		snapDir:  filepath.Join(cfg.Dir, snapsDir),
		maxCount: cfg.MaxCount,
		log:      log,
		now:      time.Now,
		createTemp: func(dir, pattern string) (tempFile, error) {
			return os.CreateTemp(dir, pattern)
		},
		sessions: make(map[string]SessionInfo),
		snaps:    make(map[string]map[string]SnapshotInfo),
	}
	for _, d := range []string{st.sessDir, st.snapDir} {
		if err := os.MkdirAll(d, privateDir); err != nil {
			return nil, fmt.Errorf("snapshots: %w", err)
		}
	}
	if err := st.scan(); err != nil {
		return nil, err
	}
	return st, nil
}

// scan builds the index from the files, checking each one fully, in
// parallel.
func (st *FileStore) scan() error {
	var jobs []func()
	ents, err := os.ReadDir(st.sessDir)
	if err != nil {
		return fmt.Errorf("snapshots: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		k, ok := strings.CutSuffix(name, fileExt)
		switch {
		case strings.HasPrefix(name, tempPrefix):
			st.removeTemp(filepath.Join(st.sessDir, name))
		case ok && isKey(k) && e.Type().IsRegular():
			jobs = append(jobs, func() { st.indexSession(k) })
		}
	}
	ents, err = os.ReadDir(st.snapDir)
	if err != nil {
		return fmt.Errorf("snapshots: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() || !isKey(e.Name()) {
			continue
		}
		k := e.Name()
		dir := filepath.Join(st.snapDir, k)
		files, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("snapshots: %w", err)
		}
		for _, f := range files {
			name := f.Name()
			snapID, ok := strings.CutSuffix(name, fileExt)
			switch {
			case strings.HasPrefix(name, tempPrefix):
				st.removeTemp(filepath.Join(dir, name))
			case ok && checkSnapID(snapID) == nil && f.Type().IsRegular():
				jobs = append(jobs, func() { st.indexSnapshot(k, snapID) })
			}
		}
	}
	run(jobs, runtime.GOMAXPROCS(0))
	// max_count may have been lowered since the snapshots were written.
	for k := range st.snaps {
		st.prune(k)
	}
	return nil
}

// run calls every job, n at a time.
func run(jobs []func(), n int) {
	ch := make(chan func())
	var wg sync.WaitGroup
	for range min(n, len(jobs)) {
		wg.Go(func() {
			for job := range ch {
				job()
			}
		})
	}
	for _, job := range jobs {
		ch <- job
	}
	close(ch)
	wg.Wait()
}

func (st *FileStore) removeTemp(path string) {
	st.log.Info("snapshots: removing the temporary file of an interrupted write", "path", path)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		st.log.Warn("snapshots: remove temporary file", "path", path, "err", err)
	}
}

func (st *FileStore) indexSession(k string) {
	path := st.sessionPath(k)
	data, err := st.read(path)
	if err != nil {
		st.log.Error("snapshots: read session", "path", path, "err", err)
		return
	}
	info, err := readInfo[SessionInfo](data, formatSession)
	if err == nil && key(info.ID) != k {
		err = fmt.Errorf("%w: record holds another session id", ErrCorrupt)
	}
	if err != nil {
		st.setAside(path, err)
		return
	}
	st.mu.Lock()
	st.sessions[k] = info
	st.mu.Unlock()
}

func (st *FileStore) indexSnapshot(k, snapID string) {
	path := st.snapshotPath(k, snapID)
	data, err := st.read(path)
	if err != nil {
		st.log.Error("snapshots: read snapshot", "path", path, "err", err)
		return
	}
	info, err := readInfo[SnapshotInfo](data, formatSnapshot)
	if err == nil && (info.ID != snapID || key(info.SessionID) != k) {
		err = fmt.Errorf("%w: record holds another snapshot", ErrCorrupt)
	}
	if err != nil {
		st.setAside(path, err)
		return
	}
	info.Bytes = len(data)
	st.mu.Lock()
	st.addSnap(k, info)
	st.mu.Unlock()
}

// addSnap indexes a snapshot; st.mu must be held.
func (st *FileStore) addSnap(k string, info SnapshotInfo) {
	m := st.snaps[k]
	if m == nil {
		m = make(map[string]SnapshotInfo)
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

func (st *FileStore) sessionPath(k string) string {
	return filepath.Join(st.sessDir, k+fileExt)
}

func (st *FileStore) snapshotPath(k, snapID string) string {
	return filepath.Join(st.snapDir, k, snapID+fileExt)
}

// read reads a file; a missing file is ErrNotFound.
func (st *FileStore) read(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		st.counters.reads.Add(1)
		return data, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, ErrNotFound
	}
	st.counters.readErrors.Add(1)
	return nil, fmt.Errorf("snapshots: %w", err)
}

// setAside renames a corrupt file to NAME.corrupt so that it is reported
// once, kept for inspection and skipped from then on. The caller holds the
// file's key lock (or is the scan, before the store is shared).
func (st *FileStore) setAside(path string, cause error) {
	st.counters.corrupt.Add(1)
	st.log.Error("snapshots: corrupt file set aside; everything else still loads", "path", path, "err", cause)
	if err := os.Rename(path, path+corruptExt); err != nil {
		st.log.Warn("snapshots: set aside corrupt file", "path", path, "err", err)
	}
}

// write replaces dir/name with data atomically.
func (st *FileStore) write(dir, name string, data []byte) (err error) {
	defer func() {
		if err != nil {
			st.counters.writeErrors.Add(1)
			err = fmt.Errorf("snapshots: write %s: %w", filepath.Join(dir, name), err)
			return
		}
		st.counters.writes.Add(1)
		st.counters.writeBytes.Add(uint64(len(data)))
	}()
	f, err := st.createTemp(dir, tempPrefix+name+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	st.syncDir(dir)
	return nil
}

// syncDir makes a rename or removal in dir durable. Once the rename is
// done the new file is what every reader sees, so a failure here is
// logged, not returned: only its survival of a power cut is in doubt.
func (st *FileStore) syncDir(dir string) {
	d, err := os.Open(dir)
	if err == nil {
		err = d.Sync()
		if cerr := d.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		st.log.Warn("snapshots: fsync directory", "dir", dir, "err", err)
	}
}

// Get returns session id.
func (st *FileStore) Get(ctx context.Context, id string) (*Session, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k := key(id)
	data, err := st.read(st.sessionPath(k))
	if err != nil {
		return nil, err
	}
	s, err := readSession(data, id)
	if err != nil {
		st.corruptSession(k, id)
		return nil, fmt.Errorf("snapshots: session %q: %w", id, err)
	}
	return s, nil
}

// corruptSession sets a session file aside after a failed read, if it is
// still the bad one: a concurrent Update may have replaced it meanwhile.
func (st *FileStore) corruptSession(k, id string) {
	defer st.sessLocks.lock(k)()
	path := st.sessionPath(k)
	data, err := st.read(path)
	if err != nil {
		return
	}
	if _, err := readSession(data, id); err != nil {
		st.setAside(path, err)
		st.mu.Lock()
		delete(st.sessions, k)
		st.mu.Unlock()
	}
}

// Update changes session id atomically; see Store.
func (st *FileStore) Update(ctx context.Context, id string, fn func(*Session) error) error {
	return st.update(ctx, id, true, fn)
}

// Clear removes session id's turns and keeps its metadata; see Store.
func (st *FileStore) Clear(ctx context.Context, id string) error {
	return st.update(ctx, id, false, func(s *Session) error {
		s.clear()
		return nil
	})
}

func (st *FileStore) update(ctx context.Context, id string, create bool, fn func(*Session) error) error {
	if err := CheckID(id); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	k := key(id)
	defer st.sessLocks.lock(k)()
	path := st.sessionPath(k)
	now := st.now().UTC()
	var s *Session
	data, err := st.read(path)
	switch {
	case err == nil:
		if s, err = readSession(data, id); err != nil {
			// Setting it aside keeps the session usable: the bad file is
			// kept for inspection and the conversation starts again.
			st.setAside(path, err)
			s = nil
		}
	case !errors.Is(err, ErrNotFound):
		return err
	}
	data, info, err := change(s, id, create, now, fn)
	if err != nil {
		return err
	}
	if err := st.write(st.sessDir, k+fileExt, data); err != nil {
		st.log.Error("snapshots: save session", "session", id, "err", err)
		return err
	}
	st.mu.Lock()
	st.sessions[k] = info
	st.mu.Unlock()
	return nil
}

// List returns every session, most recently updated first.
func (st *FileStore) List(ctx context.Context) ([]SessionInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st.mu.RLock()
	out := make([]SessionInfo, 0, len(st.sessions))
	for k, info := range st.sessions {
		info.Snapshots = len(st.snaps[k])
		out = append(out, info)
	}
	st.mu.RUnlock()
	sortSessions(out)
	return out, nil
}

// sortSessions orders a listing most recently updated first.
func sortSessions(infos []SessionInfo) {
	slices.SortFunc(infos, func(a, b SessionInfo) int {
		if c := b.Updated.Compare(a.Updated); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// Delete removes session id and its snapshots.
func (st *FileStore) Delete(ctx context.Context, id string) error {
	if err := CheckID(id); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	k := key(id)
	defer st.sessLocks.lock(k)()
	defer st.snapLocks.lock(k)()
	found := false
	err := os.Remove(st.sessionPath(k))
	switch {
	case err == nil:
		found = true
		st.syncDir(st.sessDir)
	case errors.Is(err, fs.ErrNotExist):
		err = nil
	}
	if err != nil {
		st.counters.writeErrors.Add(1)
		return fmt.Errorf("snapshots: delete session %q: %w", id, err)
	}
	st.mu.Lock()
	delete(st.sessions, k)
	found = found || len(st.snaps[k]) > 0
	delete(st.snaps, k)
	st.mu.Unlock()
	dir := filepath.Join(st.snapDir, k)
	if _, err := os.Stat(dir); err == nil {
		if err := os.RemoveAll(dir); err != nil {
			st.counters.writeErrors.Add(1)
			return fmt.Errorf("snapshots: delete snapshots of %q: %w", id, err)
		}
		found = true
		st.syncDir(st.snapDir)
	}
	if !found {
		return ErrNotFound
	}
	return nil
}

// SaveSnapshot stores snap and applies the retention limit; see Store.
func (st *FileStore) SaveSnapshot(ctx context.Context, snap *Snapshot) (SnapshotInfo, error) {
	if err := CheckID(snap.SessionID); err != nil {
		return SnapshotInfo{}, err
	}
	if snap.ID != "" {
		if err := checkSnapID(snap.ID); err != nil {
			return SnapshotInfo{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return SnapshotInfo{}, err
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
		return SnapshotInfo{}, err
	}
	dir := filepath.Join(st.snapDir, k)
	switch err := os.Mkdir(dir, privateDir); {
	case err == nil:
		st.syncDir(st.snapDir)
	case !errors.Is(err, fs.ErrExist):
		st.counters.writeErrors.Add(1)
		err = fmt.Errorf("snapshots: %w", err)
		st.log.Error("snapshots: save snapshot", "session", s.SessionID, "err", err)
		return SnapshotInfo{}, err
	}
	if err := st.write(dir, s.ID+fileExt, data); err != nil {
		st.log.Error("snapshots: save snapshot", "session", s.SessionID, "err", err)
		return SnapshotInfo{}, err
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
	var old []SnapshotInfo
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
	st.syncDir(filepath.Join(st.snapDir, k))
}

// sortedSnaps returns the infos newest first.
func sortedSnaps(m map[string]SnapshotInfo) []SnapshotInfo {
	out := make([]SnapshotInfo, 0, len(m))
	for _, info := range m {
		out = append(out, info)
	}
	slices.SortFunc(out, newer)
	return out
}

// ListSnapshots returns session id's snapshots newest first.
func (st *FileStore) ListSnapshots(ctx context.Context, id string) ([]SnapshotInfo, error) {
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
func (st *FileStore) LoadSnapshot(ctx context.Context, id, snapID string) (*Snapshot, error) {
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
	data, err := st.read(path)
	if err != nil {
		return nil, err
	}
	snap, err := readSnapshot(data, id, snapID)
	if err != nil {
		unlock := st.snapLocks.lock(k)
		if data, rerr := st.read(path); rerr == nil {
			if _, rerr := readSnapshot(data, id, snapID); rerr != nil {
				st.setAside(path, rerr)
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
func (st *FileStore) DeleteSnapshot(ctx context.Context, id, snapID string) error {
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
	err := os.Remove(st.snapshotPath(k, snapID))
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
	st.syncDir(filepath.Join(st.snapDir, k))
	return nil
}

// Counters returns the store's running totals.
func (st *FileStore) Counters() Counters { return st.counters.get() }

// Close releases nothing: every write is complete when it returns. It is
// there for Store.
func (st *FileStore) Close() error { return nil }
