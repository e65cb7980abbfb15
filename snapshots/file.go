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

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// FileStore keeps sessions and snapshots in files under a directory:
//
//	DIR/sessions/KEY.log
//	DIR/snapshots/KEY/SNAPSHOT-ID.json.gz
//
// where KEY is the hex SHA-256 of the session id. A session is a log of
// records (log.go), one per change: a turn appends the turn with one
// pwrite to the log, kept open between turns (filesync.go). The record is
// in the kernel's page cache when Update returns, so what Update
// acknowledged survives a crash of the process, and a crash loses at most
// the change being written, which was not acknowledged (its torn tail is
// cut at the last whole record when the log is next read). Appended
// records are fsynced in the background within Config.FsyncInterval (1s),
// so a power cut or an OS crash can lose that last interval's turns; a
// negative interval fsyncs each record before Update returns. A new
// session, a replaced history and a compaction write a whole new log
// instead, atomically (temporary file, fsync, rename, fsync of the
// directory), as snapshots are written, whatever the interval.
// Logs are compacted in the background once the records after the last
// whole copy of the session outweigh it.
//
// The decoded state of recently used sessions is cached (bounded), so an
// update reads nothing; listings come from an in-memory index, built when
// the store opens by checking every record's CRC, so that listing reads no
// file. Session files of the format before the log (KEY.json.gz) are
// converted when the store opens.
//
// A file that fails its checks is logged, counted, renamed to NAME.corrupt
// (kept for inspection, never read again) and treated as absent; every
// other file keeps loading, so that one bad file costs one session, not
// the store. A session log with a corrupt record inside it is copied whole
// to KEY.log.corrupt-TIME and rewritten without the record, keeping the
// records after it
// (logrecover.go).
//
// One process owns a directory; several replicas need RedisStore.
type FileStore struct {
	sessDir  string
	snapDir  string
	maxCount int
	log      *slog.Logger
	now      func() time.Time
	files    files
	obs      observer

	sessLocks keyLocks
	snapLocks keyLocks
	cache     *stateCache
	compactor *compactor
	syncs     *syncer

	mu       sync.RWMutex
	sessions map[string]Listing                          // by key; Bytes is the log's size
	snaps    map[string]map[string]adminapi.SnapshotInfo // by key, then snapshot id

	counters counters
}

const (
	fileExt     = ".json.gz"
	logExt      = ".log"
	tempPrefix  = ".tmp-"
	corruptExt  = ".corrupt"
	privateDir  = 0o700 // conversations are private: owner only
	sessionsDir = "sessions"
	snapsDir    = "snapshots"
	// logMagic starts every session log.
	logMagic = "ctxproxy session log 2\n"
)

// NewFileStore opens (creating it if needed) the file store in cfg.Dir and
// builds its index. Leftover temporary files of an interrupted write are
// removed, torn log tails cut, corrupt files set aside and session files
// of the earlier format converted to logs.
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
		obs:      observer{StoreFile, cfg.Observe},
		cache:    newStateCache(defaultCacheBytes),
		sessions: make(map[string]Listing),
		snaps:    make(map[string]map[string]adminapi.SnapshotInfo),
	}
	st.counters.copies = cfg.Dir
	if abs, err := filepath.Abs(cfg.Dir); err == nil {
		st.counters.copies = abs
	}
	st.files = newFiles(log, &st.counters)
	for _, d := range []string{st.sessDir, st.snapDir} {
		if err := os.MkdirAll(d, privateDir); err != nil {
			return nil, fmt.Errorf("snapshots: %w", err)
		}
	}
	if err := st.scan(); err != nil {
		return nil, err
	}
	st.compactor = newCompactor(st.compact)
	st.syncs = newSyncer(cfg.FsyncInterval, st.syncLog)
	return st, nil
}

// scan builds the index from the files, checking each one, in parallel.
func (st *FileStore) scan() error {
	var jobs []func()
	ents, err := os.ReadDir(st.sessDir)
	if err != nil {
		return fmt.Errorf("snapshots: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		k, isLog := strings.CutSuffix(name, logExt)
		k1, isV1 := strings.CutSuffix(name, fileExt)
		switch {
		case strings.HasPrefix(name, tempPrefix):
			st.files.removeTemp(filepath.Join(st.sessDir, name))
		case isLog && isKey(k) && e.Type().IsRegular():
			jobs = append(jobs, func() { st.indexSession(k) })
		case isV1 && isKey(k1) && e.Type().IsRegular():
			jobs = append(jobs, func() { st.migrate(k1) })
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
				st.files.removeTemp(filepath.Join(dir, name))
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

// indexSession checks every record's CRC in session k's log, cuts a torn
// or corrupt tail, and indexes the listing entry of the last good record.
// The records are decoded when the session is first read, unless a bad
// record has valid ones after it: then the log is replayed and repaired
// now (load).
func (st *FileStore) indexSession(k string) {
	path := st.logPath(k)
	data, err := st.files.read(path)
	if err != nil {
		st.log.Error("snapshots: read session", "path", path, "err", err)
		return
	}
	good, last, cause := len(logMagic), []byte(nil), error(nil)
	if !strings.HasPrefix(string(data), logMagic) {
		cause = fmt.Errorf("%w: not a session log", ErrCorrupt)
	}
	for cause == nil {
		p, n, state := nextFrame(data[good:])
		if state == frameEnd {
			break
		}
		if state == frameOK {
			last, good = p, good+n
			continue
		}
		budget := resyncBudget(data)
		if next := resync(data, good+1, ofKey(k), &budget); next > 0 {
			// A damaged record with whole ones after it: replay the
			// log, which skips it, keeps a copy and rewrites it.
			p, _, _ := nextFrame(data[next:])
			if info, err := payloadInfo(p); err == nil {
				if _, err := st.load(k, info.SessionID); err != nil {
					st.log.Error("snapshots: read session", "path", path, "err", err)
				}
				return
			}
		}
		cause = errTorn
		if state == frameCorrupt {
			cause = fmt.Errorf("%w: record at byte %d fails its CRC-32C", ErrCorrupt, good)
		}
	}
	var info Listing
	if last == nil && cause == nil {
		cause = fmt.Errorf("%w: a session log without records", ErrCorrupt)
	}
	if last != nil {
		if info, err = payloadInfo(last); err == nil && key(info.SessionID) != k {
			err = fmt.Errorf("%w: record holds another session id", ErrCorrupt)
		}
		if err != nil {
			last, cause = nil, err
		}
	}
	if last == nil {
		st.files.setAside(path, cause)
		return
	}
	if cause != nil {
		st.files.cut(path, data, good, cause)
	}
	info.Bytes = int64(good)
	st.mu.Lock()
	st.sessions[k] = info
	st.mu.Unlock()
}

// migrate converts session k's file of the format before the log into a
// log holding one replace record. A log already there (a conversion a
// crash interrupted after the log was written) wins.
func (st *FileStore) migrate(k string) {
	old := filepath.Join(st.sessDir, k+fileExt)
	if _, err := os.Stat(st.logPath(k)); err == nil {
		st.files.removeTemp(old)
		return
	}
	data, err := st.files.read(old)
	if err != nil {
		st.log.Error("snapshots: read session", "path", old, "err", err)
		return
	}
	info, err := readInfo[Listing](data, formatSession)
	var s *Session
	if err == nil {
		s, err = readSession(data, info.SessionID)
	}
	if err == nil && key(info.SessionID) != k {
		err = fmt.Errorf("%w: record holds another session id", ErrCorrupt)
	}
	if err != nil {
		st.files.setAside(old, err)
		return
	}
	n, err := st.files.writeLog(st.sessDir, k+logExt, s)
	if err != nil {
		st.log.Error("snapshots: convert a session file to a log; it stays as it is", "path", old, "err", err)
		return
	}
	if err := os.Remove(old); err != nil {
		st.log.Warn("snapshots: remove a converted session file", "path", old, "err", err)
	}
	st.files.syncDir(st.sessDir)
	st.log.Info("snapshots: session file converted to a log", "path", old)
	info = s.Info()
	info.Bytes = n
	st.mu.Lock()
	st.sessions[k] = info
	st.mu.Unlock()
}

func (st *FileStore) logPath(k string) string {
	return filepath.Join(st.sessDir, k+logExt)
}

// load returns session k's cached state, replaying its log when it is
// not cached; nil when there is no session. The caller holds k's lock. A
// log without a record that loads is set aside and reported with an
// error wrapping ErrCorrupt; a bad tail is cut and the rest loads; a log
// with corrupt records skipped is copied and rewritten whole (repair),
// and when no copy can be kept the session is not read (an error) rather
// than the log changed without one.
func (st *FileStore) load(k, id string) (*cached, error) {
	if e := st.cache.get(k); e != nil {
		return e, nil
	}
	path := st.logPath(k)
	data, err := st.files.read(path)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	var r replayed
	if strings.HasPrefix(string(data), logMagic) {
		r = replay(data[len(logMagic):], len(logMagic), id)
	} else {
		r.cut = fmt.Errorf("%w: not a session log", ErrCorrupt)
	}
	if r.s == nil {
		if r.cut == nil || errors.Is(r.cut, errTorn) {
			r.cut = fmt.Errorf("%w: no whole record: %v", ErrCorrupt, r.cut)
		}
		st.files.setAside(path, r.cut)
		st.mu.Lock()
		delete(st.sessions, k)
		st.mu.Unlock()
		return nil, r.cut
	}
	size, base := int64(r.good), int64(r.base)
	switch {
	case len(r.lost) > 0:
		if size, base, err = st.files.repair(st.sessDir, k+logExt, data, r); err != nil {
			return nil, err
		}
		st.setInfo(k, r.s, size)
	case r.cut != nil:
		st.files.cut(path, data, r.good, r.cut)
		st.setInfo(k, r.s, size)
	}
	e := &cached{k: k, s: r.s, size: size, base: base}
	st.cache.put(e)
	return e, nil
}

// setInfo indexes session k's listing entry after a change.
func (st *FileStore) setInfo(k string, s *Session, size int64) {
	info := s.Info()
	info.Bytes = size
	st.mu.Lock()
	st.sessions[k] = info
	st.mu.Unlock()
}

// Get returns session id.
func (st *FileStore) Get(ctx context.Context, id string) (s *Session, err error) {
	defer st.obs.done(OpGet, &err)
	if err := CheckID(id); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k := key(id)
	defer st.sessLocks.lock(k)()
	e, err := st.load(k, id)
	switch {
	case err != nil:
		return nil, fmt.Errorf("snapshots: session %q: %w", id, err)
	case e == nil:
		return nil, ErrNotFound
	}
	st.counters.reads.Add(1)
	return e.s.Clone(), nil
}

// Update changes session id atomically; see Store.
func (st *FileStore) Update(ctx context.Context, id string, fn func(*Session) error) (err error) {
	defer st.obs.done(OpUpdate, &err)
	return st.update(ctx, id, true, fn)
}

// Clear removes session id's turns and keeps its metadata; see Store.
func (st *FileStore) Clear(ctx context.Context, id string) (err error) {
	defer st.obs.done(OpClear, &err)
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
	e, err := st.load(k, id)
	switch {
	case errors.Is(err, ErrCorrupt):
		// The bad log is set aside, kept for inspection; the
		// conversation starts again.
	case err != nil:
		return err
	}
	var old *Session
	if e != nil {
		old = e.s
	}
	p, err := change(old, id, create, false, st.now().UTC(), fn)
	if err != nil {
		return err
	}
	rec := frame(p)
	if e == nil || p[0] == kindReplace {
		// A new log: nothing before this record is needed any more.
		n, err := st.files.write(st.sessDir, k+logExt, []byte(logMagic), rec)
		if err != nil {
			st.log.Error("snapshots: save session", "session", id, "err", err)
			return err
		}
		e = &cached{k: k, size: n, base: n}
	} else {
		durable := !st.syncs.mark(k, id)
		if err := st.files.appendAt(st.logPath(k), e.size, rec, durable); err != nil {
			st.log.Error("snapshots: save session", "session", id, "err", err)
			return err
		}
		e.size += int64(len(rec))
	}
	if e.s, err = apply(e.s, id, p); err != nil {
		// Stored but not understood: let the next read replay the log.
		st.cache.drop(k)
		return fmt.Errorf("snapshots: session %q: %w", id, err)
	}
	st.cache.put(e)
	st.setInfo(k, e.s, e.size)
	if e.needsCompaction() {
		st.compactor.request(k, id)
	}
	return nil
}

// compact rewrites session id's log as one replace record of its state.
func (st *FileStore) compact(k, id string) {
	var err error
	defer st.obs.done(OpCompact, &err)
	defer st.sessLocks.lock(k)()
	e, err := st.load(k, id)
	if e == nil || err != nil || !e.needsCompaction() {
		return // deleted, replaced or compacted meanwhile
	}
	n, err := st.files.writeLog(st.sessDir, k+logExt, e.s)
	if err != nil {
		// The log is still whole; the next record asks again.
		st.log.Warn("snapshots: compact a session log", "session", id, "err", err)
		return
	}
	e.size, e.base = n, n
	st.setInfo(k, e.s, n)
}

// List returns every session, most recently updated first.
func (st *FileStore) List(ctx context.Context) (out []Listing, err error) {
	defer st.obs.done(OpList, &err)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st.mu.RLock()
	out = make([]Listing, 0, len(st.sessions))
	for k, info := range st.sessions {
		info.Snapshots = len(st.snaps[k])
		for _, snap := range st.snaps[k] {
			info.Bytes += int64(snap.Bytes)
		}
		out = append(out, info)
	}
	st.mu.RUnlock()
	sortSessions(out)
	return out, nil
}

// sortSessions orders a listing most recently updated first.
func sortSessions(infos []Listing) {
	slices.SortFunc(infos, func(a, b Listing) int { return adminapi.NewestFirst(a.Updated, b.Updated, a.SessionID, b.SessionID) })
}

// Delete removes session id and its snapshots.
func (st *FileStore) Delete(ctx context.Context, id string) (err error) {
	defer st.obs.done(OpDelete, &err)
	if err := CheckID(id); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	k := key(id)
	defer st.sessLocks.lock(k)()
	defer st.snapLocks.lock(k)()
	st.cache.drop(k)
	st.files.logs.drop(st.logPath(k))
	found := false
	err = os.Remove(st.logPath(k))
	switch {
	case err == nil:
		found = true
		st.files.syncDir(st.sessDir)
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
		st.files.syncDir(st.snapDir)
	}
	if !found {
		return ErrNotFound
	}
	return nil
}

// Counters returns the store's running totals.
func (st *FileStore) Counters() Counters { return st.counters.get() }

// Close stops the background compaction (a log left uncompacted is
// whole), fsyncs the logs appended to since the syncer's last round and
// closes the logs kept open. Every write is complete and durable when it
// returns; the error is that of a failed fsync. Updates after Close still
// work, fsyncing each record.
func (st *FileStore) Close() error {
	st.compactor.close()
	err := st.syncs.close()
	st.files.logs.closeAll()
	return err
}
