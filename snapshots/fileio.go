package snapshots

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// files is FileStore's access to the disk: whole files replaced
// atomically (snapshots, new and compacted logs) and records appended to
// logs, which stay open in logs between appends. Tests swap createTemp and
// openLog to make writes fail as on a full disk.
type files struct {
	log      *slog.Logger
	counters *counters
	logs     *logPool
	// createTemp makes the temporary file a replacement goes to.
	createTemp func(dir, pattern string) (tempFile, error)
	// openLog opens an existing log to append to.
	openLog func(path string) (logFile, error)
}

type tempFile interface {
	Write(p []byte) (int, error)
	Sync() error
	Close() error
	Name() string
}

type logFile interface {
	WriteAt(p []byte, off int64) (int, error)
	Truncate(size int64) error
	Sync() error
	Close() error
}

func newFiles(log *slog.Logger, c *counters) files {
	return files{
		log:      log,
		counters: c,
		logs:     newLogPool(maxOpenLogs),
		createTemp: func(dir, pattern string) (tempFile, error) {
			return os.CreateTemp(dir, pattern)
		},
		openLog: func(path string) (logFile, error) {
			return os.OpenFile(path, os.O_WRONLY, 0)
		},
	}
}

// read reads a file; a missing file is ErrNotFound.
func (f files) read(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		f.counters.reads.Add(1)
		return data, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, ErrNotFound
	}
	f.counters.readErrors.Add(1)
	return nil, fmt.Errorf("snapshots: %w", err)
}

// write replaces dir/name with the parts, atomically: written to a
// temporary file in the same directory, fsynced, renamed over the old one,
// and the directory fsynced, so a crash at any moment leaves the old
// version or the new one, never a mix, whatever fsync_interval says. It
// returns the bytes written. A log kept open is closed first: the caller
// holds its session's lock, and the new log is the one appended to next.
func (f files) write(dir, name string, parts ...[]byte) (n int64, err error) {
	path := filepath.Join(dir, name)
	defer func() {
		if err != nil {
			f.counters.writeErrors.Add(1)
			err = fmt.Errorf("snapshots: write %s: %w", path, err)
			return
		}
		f.counters.writes.Add(1)
		f.counters.writeBytes.Add(uint64(n))
	}()
	t, err := f.createTemp(dir, tempPrefix+name+"-*")
	if err != nil {
		return 0, err
	}
	tmp := t.Name()
	for _, p := range parts {
		if err == nil {
			_, err = t.Write(p)
			n += int64(len(p))
		}
	}
	if err == nil {
		err = t.Sync()
	}
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		f.logs.drop(path)
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return 0, err
	}
	f.syncDir(dir)
	return n, nil
}

// appendAt writes rec at offset off of the log at path, the end of its
// last good record, with the log's descriptor kept open from the last
// append when there is one. With durable it fsyncs before returning, and
// an acknowledged record survives a power cut; without, the syncer
// fsyncs it within the interval, and until then it survives a crash of
// the process but not of the machine (Config.FsyncInterval). Writing at
// the offset rather than appending means the bytes of an earlier failed
// write are overwritten, never left between two good records; a failure
// truncates them away if it can, and closes the descriptor, so that the
// next append starts from a fresh open.
func (f files) appendAt(path string, off int64, rec []byte, durable bool) (err error) {
	defer func() {
		if err != nil {
			f.counters.writeErrors.Add(1)
			err = fmt.Errorf("snapshots: append to %s: %w", path, err)
			return
		}
		f.counters.writes.Add(1)
		f.counters.writeBytes.Add(uint64(len(rec)))
	}()
	lf := f.logs.take(path)
	if lf == nil {
		if lf, err = f.openLog(path); err != nil {
			return err
		}
	}
	_, err = lf.WriteAt(rec, off)
	if err == nil && durable {
		err = lf.Sync()
	}
	if err != nil {
		lf.Truncate(off)
		lf.Close()
		return err
	}
	f.logs.put(path, lf)
	return nil
}

// writeLog replaces the log dir/name with one replace record of s,
// atomically (write): a session file converted to a log, a compaction,
// and a log rewritten without its corrupt records.
func (f files) writeLog(dir, name string, s *Session) (int64, error) {
	p, err := encodeReplace(s)
	if err != nil {
		return 0, err
	}
	return f.write(dir, name, []byte(logMagic), frame(p))
}

// cut truncates the log at path to its good bytes after replay found a
// torn or corrupt record with nothing valid after it. A corrupt tail is
// counted, logged and the log copied whole first (keepCopy); a torn one
// is the unacknowledged write a crash interrupted and is only noted.
func (f files) cut(path string, data []byte, good int, cause error) {
	if errors.Is(cause, errTorn) {
		f.counters.torn.Add(1)
		f.log.Warn("snapshots: cutting an interrupted write off a session log", "path", path, "bytes", len(data)-good)
	} else {
		f.counters.corrupt.Add(1)
		copyPath, err := f.keepCopy(path, data)
		if err != nil {
			f.log.Warn("snapshots: keep a copy of a session log before cutting its corrupt tail", "path", path, "err", err)
		}
		f.log.Error("snapshots: corrupt record at the end of a session log, nothing valid after it; cut there, the records before it still load",
			"path", path, "offset", good, "bytes", len(data)-good, "copy", copyPath, "err", cause)
	}
	f.logs.drop(path)
	if err := os.Truncate(path, int64(good)); err != nil {
		f.log.Error("snapshots: cut a session log", "path", path, "err", err)
	}
}

// keepCopy writes data, the bytes of the file at path as they were read,
// to a new file beside it, PATH.corrupt-TIME (UTC, to the nanosecond, so
// that a later copy of the same log never replaces an earlier one), and
// makes it durable before the caller rewrites or cuts the original. It
// returns the copy's path. The copies are never read again; they are kept
// for inspection and recovery by hand, and removed by hand.
func (f files) keepCopy(path string, data []byte) (copyPath string, err error) {
	copyPath = path + corruptExt + "-" + time.Now().UTC().Format("20060102T150405.000000000Z")
	c, err := os.OpenFile(copyPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	_, err = c.Write(data)
	if err == nil {
		err = c.Sync()
	}
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(copyPath)
		return "", err
	}
	f.syncDir(filepath.Dir(path))
	return copyPath, nil
}

// syncDir makes a rename or removal in dir durable. Once the rename is
// done the new file is what every reader sees, so a failure here is
// logged, not returned: only its survival of a power cut is in doubt.
func (f files) syncDir(dir string) {
	d, err := os.Open(dir)
	if err == nil {
		err = d.Sync()
		if cerr := d.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		f.log.Warn("snapshots: fsync directory", "dir", dir, "err", err)
	}
}

// setAside renames a corrupt file to NAME.corrupt so that it is reported
// once, kept for inspection and skipped from then on. The caller holds the
// file's key lock (or is the scan, before the store is shared).
func (f files) setAside(path string, cause error) {
	f.counters.corrupt.Add(1)
	f.log.Error("snapshots: corrupt file set aside; everything else still loads", "path", path, "err", cause)
	f.logs.drop(path)
	if err := os.Rename(path, path+corruptExt); err != nil {
		f.log.Warn("snapshots: set aside corrupt file", "path", path, "err", err)
	}
}

func (f files) removeTemp(path string) {
	f.log.Info("snapshots: removing the temporary file of an interrupted write", "path", path)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		f.log.Warn("snapshots: remove temporary file", "path", path, "err", err)
	}
}

// repair handles the log dir/name (as read: data) in which replay
// skipped corrupt records and kept the records after them (r): it keeps a
// copy of the log as it was (keepCopy), counts and logs the records lost,
// and rewrites the log as one replace record of the recovered session,
// as compaction does, so that the next read finds it whole. It returns
// the log's size and where its last replace record ends. Without a copy
// nothing is rewritten and the error says why; when the rewrite fails the
// damaged log stays as it is (its copy kept) and the sizes are those of
// the records read, so that the next append goes after the last good one.
func (f files) repair(dir, name string, data []byte, r replayed) (size, base int64, err error) {
	path := filepath.Join(dir, name)
	copyPath, err := f.keepCopy(path, data)
	if err != nil {
		f.counters.writeErrors.Add(1)
		return 0, 0, fmt.Errorf("snapshots: the session log %s holds corrupt records and no copy of it could be kept, "+
			"so it is left as it is: %w", path, err)
	}
	reportLost(f.log, f.counters, r, "path", path, "offset", r.lostAt(), "copy", copyPath)
	switch {
	case errors.Is(r.cut, errTorn):
		f.counters.torn.Add(1)
	case r.cut != nil:
		f.counters.corrupt.Add(1)
		f.log.Error("snapshots: corrupt record at the end of a session log, nothing valid after it; dropped by the rewrite",
			"path", path, "copy", copyPath, "err", r.cut)
	}
	n, err := f.writeLog(dir, name, r.s)
	if err != nil {
		f.log.Error("snapshots: rewrite a session log without its corrupt records; it stays as it is until the next read",
			"path", path, "err", err)
		return int64(r.good), int64(r.base), nil
	}
	return n, n, nil
}
