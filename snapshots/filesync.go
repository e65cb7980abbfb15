package snapshots

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/cache"
)

// A turn used to cost the store open, two fcntl, an epoll_ctl the kernel
// refuses for a regular file, pwrite, fsync and close on the session's
// log: about 15% of ctxproxy's CPU on a small chat. Two things make it a
// pwrite: the logs appended to most recently stay open (logPool), and
// their fsync is batched per interval in the background (syncer), unless
// snapshots.fsync_interval is negative.

// maxOpenLogs bounds the logs kept open between appends; a variable so
// that tests can lower it.
var maxOpenLogs = 256

// logPool keeps up to max session logs open between appends, in an
// internal/cache LRU: the least recently used is closed to make room
// (when one is put back: the logs being written are open besides those in
// the pool). A log is taken out while it is written or synced and put
// back after, by the holder of its session's lock, so a file in the pool
// is never in use and can be closed at any moment; one taken is not in
// the pool and is never closed under its user. Logs are keyed by path,
// one per session. Whoever replaces, removes or truncates a log drops it
// first (files.write, files.cut, files.setAside, FileStore.Delete), under
// the session's lock, so that no descriptor outlives its inode's place in
// the directory and no record is written to a log nobody will read.
//
// Errors of Close are not reported: what was written was written by
// WriteAt, which reported its own errors, and the fsync (inline or the
// syncer's, on this descriptor or another of the same file) reports the
// writeback's.
type logPool struct {
	open   *cache.LRU[string, logFile]
	mu     sync.Mutex // orders put against closeAll
	closed bool
}

func newLogPool(max int) *logPool {
	return &logPool{open: cache.New[string, logFile](max)}
}

// take removes the log at path from the pool and returns it, or nil when
// it is not open.
func (p *logPool) take(path string) logFile {
	f, _ := p.open.Take(path)
	return f
}

// put hands the log at path back as the most recently used, and closes
// what that displaced. After closeAll it closes f.
func (p *logPool) put(path string, f logFile) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		f.Close()
		return
	}
	if _, old, displaced := p.open.Push(path, f); displaced {
		old.Close()
	}
}

// drop closes the log at path if it is open.
func (p *logPool) drop(path string) {
	if f := p.take(path); f != nil {
		f.Close()
	}
}

// closeAll closes every log in the pool; logs put back later are closed.
func (p *logPool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for path := range p.open.All() {
		// Taken, not read from the listing: a log its user took
		// meanwhile is closed when it is put back.
		if f, ok := p.open.Take(path); ok {
			f.Close()
		}
	}
}

// syncer fsyncs the logs appended to since their last fsync, every
// interval, so that a session taking many turns costs one fsync per
// interval instead of one per turn (Config.FsyncInterval says what that
// risks). Its timer runs only while some log is dirty.
type syncer struct {
	every time.Duration // negative: appends fsync themselves
	sync  func(k, id string) error
	timer *time.Timer
	stop  chan struct{}
	done  chan struct{}

	mu     sync.Mutex
	dirty  map[string]string // session key → id, for the log
	closed bool
}

// newSyncer starts the syncer's goroutine unless every is negative; sync
// fsyncs session k's log.
func newSyncer(every time.Duration, sync func(k, id string) error) *syncer {
	s := &syncer{every: every, sync: sync, dirty: make(map[string]string)}
	if every < 0 {
		return s
	}
	s.timer = time.NewTimer(every)
	s.timer.Stop()
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.run()
	return s
}

func (s *syncer) run() {
	defer close(s.done)
	for {
		select {
		case <-s.timer.C:
			s.flush()
		case <-s.stop:
			s.timer.Stop()
			return
		}
	}
}

// mark notes that session k's log is about to be appended to and will be
// fsynced within the interval. False means the caller must fsync it
// itself before acknowledging: appends fsync each record, or the store is
// closing and no fsync will follow. The caller holds k's lock, so the
// syncer's fsync of k waits for the append it was marked for.
func (s *syncer) mark(k, id string) bool {
	if s.every < 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if len(s.dirty) == 0 {
		s.timer.Reset(s.every)
	}
	s.dirty[k] = id
	return true
}

// flush fsyncs every dirty log. A failed fsync is not retried: Linux
// forgets the pages it failed to write back, so a second fsync would
// succeed without having saved them; it is counted, logged and observed
// once (syncLog).
func (s *syncer) flush() error {
	s.mu.Lock()
	dirty := s.dirty
	s.dirty = make(map[string]string)
	s.mu.Unlock()
	var errs []error
	for k, id := range dirty {
		errs = append(errs, s.sync(k, id))
	}
	return errors.Join(errs...)
}

// close stops the goroutine and fsyncs what is still dirty; appends from
// then on fsync themselves (mark returns false).
func (s *syncer) close() error {
	s.mu.Lock()
	was := s.closed
	s.closed = true
	s.mu.Unlock()
	if was {
		return nil
	}
	if s.stop != nil {
		close(s.stop)
		<-s.done
	}
	return s.flush()
}

// syncLog fsyncs session k's log for the syncer, under k's lock so that
// no append or replacement runs meanwhile. The pooled descriptor is used
// when there is one; otherwise the log is opened, since an fsync on any
// descriptor of a file writes back all of its pages. A log gone since
// (deleted, set aside) has nothing left to keep; one replaced since was
// fsynced whole by its writer, and this fsync finds it clean.
func (st *FileStore) syncLog(k, id string) (err error) {
	defer st.obs.done(OpSync, &err)
	defer st.sessLocks.lock(k)()
	path := st.logPath(k)
	lf := st.files.logs.take(path)
	if lf == nil {
		lf, err = st.files.openLog(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	}
	if err == nil {
		if err = lf.Sync(); err == nil {
			st.files.logs.put(path, lf)
		} else {
			lf.Close()
		}
	}
	if err != nil {
		st.counters.writeErrors.Add(1)
		st.log.Error("snapshots: fsync a session log; its latest turns may not survive a power cut",
			"session", id, "key", k, "err", err)
		return fmt.Errorf("snapshots: fsync %s: %w", path, err)
	}
	return nil
}
