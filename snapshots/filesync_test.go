package snapshots

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// logSpy wraps st's logs as openLog opens them: it counts opens, the logs
// open at once and fsyncs, fails fsyncs with syncErr when set, and fails
// the test when a record is written to a log that is no longer the one
// at its path (replaced, deleted or set aside).
type logSpy struct {
	t       *testing.T
	mu      sync.Mutex
	opens   int // calls of openLog that opened a log
	open    int // logs open now
	maxOpen int
	syncs   int
	syncErr error
}

func spyLogs(t *testing.T, st *FileStore) *logSpy {
	s := &logSpy{t: t}
	st.files.openLog = func(path string) (logFile, error) {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.opens++
		s.open++
		s.maxOpen = max(s.maxOpen, s.open)
		return &spiedLog{File: f, spy: s, path: path, fi: fi}, nil
	}
	return s
}

func (s *logSpy) get() (opens, open, maxOpen, syncs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opens, s.open, s.maxOpen, s.syncs
}

type spiedLog struct {
	*os.File
	spy    *logSpy
	path   string
	fi     os.FileInfo
	closed bool
}

func (f *spiedLog) WriteAt(p []byte, off int64) (int, error) {
	if fi, err := os.Stat(f.path); err != nil || !os.SameFile(fi, f.fi) {
		f.spy.t.Errorf("a record was written to a log no longer at %s (%v)", f.path, err)
	}
	return f.File.WriteAt(p, off)
}

func (f *spiedLog) Sync() error {
	f.spy.mu.Lock()
	f.spy.syncs++
	err := f.spy.syncErr
	f.spy.mu.Unlock()
	if err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *spiedLog) Close() error {
	f.spy.mu.Lock()
	if f.closed {
		f.spy.t.Errorf("%s closed twice", f.path)
	}
	f.closed = true
	f.spy.open--
	f.spy.mu.Unlock()
	return f.File.Close()
}

// A session's log stays open between appends, and is closed and opened
// afresh when a replace record, a compaction or a delete puts a new log
// in its place: no record is written to a log that was replaced, and
// every one is there when the store is opened again.
func TestFileStoreKeepsLogOpen(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{})
	spy := spyLogs(t, st)
	mustUpdate(t, st, "s", func(s *Session) { s.Messages = conversation(4, 50, "s") })
	for i := range 20 {
		mustUpdate(t, st, "s", func(s *Session) { s.Messages = append(s.Messages, msg("user", fmt.Sprint(i))) })
	}
	if opens, open, _, _ := spy.get(); opens != 1 || open != 1 {
		t.Fatalf("20 appends opened the log %d times, %d open; want 1, 1", opens, open)
	}

	// A replace record: a new log by rename.
	mustUpdate(t, st, "s", func(s *Session) { s.Messages = conversation(4, 50, "replaced") })
	if _, open, _, _ := spy.get(); open != 0 {
		t.Errorf("the replaced log is still open")
	}
	mustUpdate(t, st, "s", func(s *Session) { s.Messages = append(s.Messages, msg("user", "after replace")) })
	if opens, _, _, _ := spy.get(); opens != 2 {
		t.Errorf("the new log was opened %d times in all, want 2", opens-1)
	}

	// Compactions, in the background, while turns go on.
	for i := range 60 {
		mustUpdate(t, st, "s", func(s *Session) {
			s.Messages = append(s.Messages, conversation(2, 600, fmt.Sprint("turn", i))...)
		})
	}
	st.compactor.wait()
	mustUpdate(t, st, "s", func(s *Session) { s.Messages = append(s.Messages, msg("user", "last")) })
	if opens, _, _, _ := spy.get(); opens < 3 {
		t.Errorf("the log was opened %d times over compactions, want one more after a compaction", opens)
	}
	want := mustGet(t, st, "s")
	if len(want.Messages) != 4+1+120+1 {
		t.Fatalf("%d messages", len(want.Messages))
	}
	if d := diff(want, mustGet(t, newFileStore(t, dir, Config{}), "s")); d != "" {
		t.Errorf("reopened (-before +after):\n%s", d)
	}

	if err := st.Delete(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if _, open, _, _ := spy.get(); open != 0 {
		t.Errorf("the deleted log is still open")
	}
	opens, _, _, _ := spy.get()
	mustUpdate(t, st, "s", func(s *Session) { s.Messages = conversation(2, 50, "again") })
	mustUpdate(t, st, "s", func(s *Session) { s.Messages = append(s.Messages, msg("user", "x")) })
	if now, _, _, _ := spy.get(); now != opens+1 {
		t.Errorf("after a delete, an append opened %d logs, want 1", now-opens)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, open, _, _ := spy.get(); open != 0 {
		t.Errorf("%d logs open after Close", open)
	}
}

// No more than maxOpenLogs logs stay open, however many sessions take
// turns (one more while an append opens its log, before it puts it back
// and the oldest is closed); those closed to make room are opened again
// when next used.
func TestFileStoreOpenLogsBound(t *testing.T) {
	defer func(n int) { maxOpenLogs = n }(maxOpenLogs)
	maxOpenLogs = 4
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{})
	spy := spyLogs(t, st)
	const sessions = 10
	for i := range sessions {
		mustUpdate(t, st, fmt.Sprint("s", i), func(s *Session) { s.Messages = conversation(2, 20, "s") })
	}
	for j := range 3 {
		for i := range sessions {
			mustUpdate(t, st, fmt.Sprint("s", i), func(s *Session) { s.Messages = append(s.Messages, msg("user", fmt.Sprint(j))) })
		}
	}
	if opens, open, maxOpen, _ := spy.get(); maxOpen > 4+1 || open != 4 || opens != 3*sessions {
		t.Errorf("%d logs open at most, %d now, %d opens; the bound is 4 (+1 being appended to)", maxOpen, open, opens)
	}
	st2 := newFileStore(t, dir, Config{})
	for i := range sessions {
		if s := mustGet(t, st2, fmt.Sprint("s", i)); len(s.Messages) != 5 {
			t.Errorf("s%d: %d messages, want 5", i, len(s.Messages))
		}
	}
}

// With an interval, Update returns before the fsync; the syncer fsyncs
// within the interval, on the log kept open; Close fsyncs what the timer
// has not reached, and appends after Close fsync themselves.
func TestFileStoreFsyncInterval(t *testing.T) {
	t.Run("timer", func(t *testing.T) {
		st := newFileStore(t, t.TempDir(), Config{FsyncInterval: 10 * time.Millisecond})
		spy := spyLogs(t, st)
		mustUpdate(t, st, "s", func(s *Session) { s.Model = "m" })
		mustUpdate(t, st, "s", func(s *Session) { s.Model = "n" })
		waitFor(t, "the fsync", func() bool { _, _, _, syncs := spy.get(); return syncs == 1 })
		if opens, open, _, _ := spy.get(); opens != 1 || open != 1 {
			t.Errorf("the syncer opened %d logs, %d open; want the append's, kept open", opens, open)
		}
	})
	t.Run("close", func(t *testing.T) {
		dir := t.TempDir()
		st := newFileStore(t, dir, Config{FsyncInterval: time.Hour})
		spy := spyLogs(t, st)
		for _, id := range []string{"a", "b"} {
			mustUpdate(t, st, id, func(s *Session) { s.Model = "m" })
			for i := range 3 {
				mustUpdate(t, st, id, func(s *Session) { s.Stats.Requests = i + 1 })
			}
		}
		if _, _, _, syncs := spy.get(); syncs != 0 {
			t.Fatalf("%d fsyncs before the interval", syncs)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if _, open, _, syncs := spy.get(); syncs != 2 || open != 0 {
			t.Errorf("Close: %d fsyncs, %d logs open; want 2, 0", syncs, open)
		}
		mustUpdate(t, st, "a", func(s *Session) { s.Stats.Requests = 9 })
		if _, open, _, syncs := spy.get(); syncs != 3 || open != 0 {
			t.Errorf("an append after Close: %d fsyncs, %d logs open; want 3, 0", syncs, open)
		}
		if s := mustGet(t, newFileStore(t, dir, Config{}), "a"); s.Stats.Requests != 9 {
			t.Errorf("reopened: requests %d, want 9", s.Stats.Requests)
		}
	})
	t.Run("always", func(t *testing.T) {
		st := newFileStore(t, t.TempDir(), Config{FsyncInterval: -1})
		spy := spyLogs(t, st)
		mustUpdate(t, st, "s", func(s *Session) { s.Model = "m" })
		for i := range 3 {
			mustUpdate(t, st, "s", func(s *Session) { s.Stats.Requests = i + 1 })
			if _, _, _, syncs := spy.get(); syncs != i+1 {
				t.Fatalf("append %d returned after %d fsyncs", i+1, syncs)
			}
		}
		if opens, _, _, _ := spy.get(); opens != 1 {
			t.Errorf("3 appends opened the log %d times, want 1", opens)
		}
	})
}

// A background fsync that fails is counted as a write error, logged and
// observed as a failed sync, once.
func TestFileStoreFsyncFails(t *testing.T) {
	var mu sync.Mutex
	var failed []error
	st := newFileStore(t, t.TempDir(), Config{FsyncInterval: 10 * time.Millisecond,
		Observe: func(store, op string, err error) {
			if op == OpSync && err != nil {
				mu.Lock()
				failed = append(failed, err)
				mu.Unlock()
			}
		}})
	spy := spyLogs(t, st)
	spy.syncErr = syscall.EIO
	mustUpdate(t, st, "s", func(s *Session) { s.Model = "m" })
	mustUpdate(t, st, "s", func(s *Session) { s.Model = "n" })
	waitFor(t, "the failed fsync", func() bool { return st.Counters().WriteErrors == 1 })
	waitFor(t, "the observed failure", func() bool { mu.Lock(); defer mu.Unlock(); return len(failed) == 1 })
	if !errors.Is(failed[0], syscall.EIO) {
		t.Errorf("observed %v, want EIO", failed[0])
	}
	if err := st.Close(); err != nil {
		t.Errorf("Close retried the failed fsync: %v", err)
	}
	if c := st.Counters(); c.WriteErrors != 1 || c.Writes != 2 {
		t.Errorf("Counters = %+v, want 1 write error, 2 writes", c)
	}
	if _, err := os.Stat(filepath.Join(st.sessDir, key("s")+logExt)); err != nil {
		t.Error(err)
	}
}
