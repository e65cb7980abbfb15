package snapshots

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFileStoreContract(t *testing.T) {
	testContract(t, func(t *testing.T) opener {
		dir := t.TempDir()
		return func(t *testing.T, cfg Config) Store { return newFileStore(t, dir, cfg) }
	})
}

// No session id reaches the file system: every name under the directory
// is a hash, a snapshot id or one of the store's own.
func TestFileStoreLayout(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{})
	for _, id := range opaqueIDs {
		mustUpdate(t, st, id, func(s *Session) { s.Messages = []Message{msg("user", "x")} })
		if _, err := st.SaveSnapshot(ctx, &Snapshot{SessionID: id}); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.Type().IsRegular() && !strings.HasSuffix(rel, fileExt) && !strings.HasSuffix(rel, logExt) {
			t.Errorf("unexpected file %s", rel)
		}
		names = append(names, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := 3 + 2*len(opaqueIDs); len(names) != want { // ., sessions, snapshots; a session and a snapshot dir each, plus a snapshot each
		want += len(opaqueIDs)
		if len(names) != want {
			t.Errorf("%d paths, want %d: %v", len(names), want, names)
		}
	}
	for _, name := range names {
		for _, part := range strings.Split(name, string(filepath.Separator)) {
			base, _ := strings.CutSuffix(part, fileExt)
			base, _ = strings.CutSuffix(base, logExt)
			if part != "." && part != sessionsDir && part != snapsDir && !isKey(base) && checkSnapID(base) != nil {
				t.Errorf("path %q has a part %q that is neither a hash nor a snapshot id", name, part)
			}
		}
	}
}

// The log format: a replace record, then an append record that carries
// only the new turn and the fields that changed. The append record's
// payload is kept as a golden file (it is plain JSON after the kind
// byte), and a log written by this version must load in later ones.
func TestFileStoreLogFormat(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{})
	mustUpdate(t, st, "golden", func(s *Session) {
		*s = *fullSession("golden")
		s.Created = time.Time{}
	})
	mustUpdate(t, st, "golden", func(s *Session) {
		s.Messages = append(s.Messages, msg("user", "one more <turn> & then some"))
		s.Stats.Requests++
	})
	want := mustGet(t, st, "golden")
	data, err := os.ReadFile(filepath.Join(dir, sessionsDir, key("golden")+logExt))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), logMagic) {
		t.Fatalf("the log does not start with %q", logMagic)
	}
	var kinds []byte
	var last []byte
	for b := data[len(logMagic):]; len(b) > 0; {
		p, n, state := nextFrame(b)
		if state != frameOK {
			t.Fatalf("frame %d: state %d", len(kinds), state)
		}
		kinds, last, b = append(kinds, p[0]), p, b[n:]
	}
	if string(kinds) != "RA" {
		t.Fatalf("record kinds %q, want a replace then an append", kinds)
	}
	golden(t, "log-append.golden", append(last[1:], '\n'))

	fixture := filepath.Join("testdata", "session-log2.bin")
	if *update {
		os.WriteFile(fixture, data, 0o644)
	}
	old, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	dir2 := t.TempDir()
	os.MkdirAll(filepath.Join(dir2, sessionsDir), 0o700)
	os.WriteFile(filepath.Join(dir2, sessionsDir, key("golden")+logExt), old, 0o600)
	if d := diff(want, mustGet(t, newFileStore(t, dir2, Config{}), "golden")); d != "" {
		t.Errorf("a version 2 log no longer loads the same (-want +got):\n%s", d)
	}
}

// A session file of the format before the log (a gzip-compressed record,
// testdata/session-v1.json.gz) is converted to a log when the store opens,
// and then takes appends like any other.
func TestFileStoreMigratesV1(t *testing.T) {
	fixture, err := os.ReadFile(filepath.Join("testdata", "session-v1.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	// The format, readable: what the v1 encoder (still the snapshots')
	// writes for the fixture's session.
	v1s := fullSession("golden")
	v1s.Created = t0.Add(time.Millisecond)
	v1s.Updated = v1s.Created
	rec, _, err := sessionRecord(v1s)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := gunzip(rec)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "session-v1.golden", plain)

	dir := t.TempDir()
	v1 := filepath.Join(dir, sessionsDir, key("golden")+fileExt)
	os.MkdirAll(filepath.Dir(v1), 0o700)
	os.WriteFile(v1, fixture, 0o600)
	st := newFileStore(t, dir, Config{})
	got := mustGet(t, st, "golden")
	want := fullSession("golden")
	want.Created, want.Updated = got.Created, got.Updated
	if d := diff(want, got); d != "" {
		t.Errorf("converted session (-want +got):\n%s", d)
	}
	if _, err := os.Stat(v1); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the old file is still there: %v", err)
	}
	if list, _ := st.List(ctx); len(list) != 1 || list[0].SessionID != "golden" || list[0].Messages != len(want.Messages) {
		t.Errorf("List after converting = %+v", list)
	}
	mustUpdate(t, st, "golden", func(s *Session) { s.Messages = append(s.Messages, msg("user", "after")) })
	again := mustGet(t, newFileStore(t, dir, Config{}), "golden")
	if n := len(again.Messages); n != len(want.Messages)+1 || again.Messages[n-1].Content != "after" {
		t.Errorf("after an append to the converted session and a restart: %d messages", n)
	}
}

// damage ways a file goes bad: cut short by a crash of something else,
// bits flipped on disk, garbage appended, zeroed, replaced.
var damage = []struct {
	name string
	fn   func([]byte) []byte
}{
	{"truncated", func(b []byte) []byte { return b[:len(b)*2/3] }},
	{"truncated trailer", func(b []byte) []byte { return b[:len(b)-3] }},
	{"bit flipped", func(b []byte) []byte { b = bytes.Clone(b); b[len(b)/2] ^= 0x10; return b }},
	{"crc flipped", func(b []byte) []byte { b = bytes.Clone(b); b[len(b)-6] ^= 0x01; return b }},
	{"garbage appended", func(b []byte) []byte { return append(bytes.Clone(b), "garbage"...) }},
	{"zero padded", func(b []byte) []byte { return append(bytes.Clone(b), make([]byte, 512)...) }},
	{"zeroed", func(b []byte) []byte { return make([]byte, len(b)) }},
	{"empty", func(b []byte) []byte { return nil }},
	{"plain JSON", func(b []byte) []byte { return []byte(`{"session_id":"x","messages":[]}`) }},
}

// logDamage are ways a session log goes bad: a write a crash cut short,
// zeros a file system left, bytes appended, bits flipped in the last
// record or the first, the whole file lost. Each is applied to a log of
// two records: the session with 20 messages, then one appended. A first
// record lost with the second whole keeps the second's turn (logrecover.go).
var logDamage = []struct {
	name string
	fn   func(b []byte, tail int) []byte // tail: where the second record starts
	// msgs is what loads afterwards (0: the session is set aside);
	// torn and corrupt are the counters it moves.
	msgs, torn, corrupt int
}{
	{"last record cut short", func(b []byte, _ int) []byte { return b[:len(b)-10] }, 20, 1, 0},
	{"last header cut short", func(b []byte, tail int) []byte { return b[:tail+5] }, 20, 1, 0},
	{"zeros after", func(b []byte, _ int) []byte { return append(b, make([]byte, 512)...) }, 21, 1, 0},
	{"garbage after", func(b []byte, _ int) []byte { return append(b, "\x05\x00\x00\x00garbage, not a record"...) }, 21, 0, 1},
	{"last record bit flipped", func(b []byte, _ int) []byte { b[len(b)-3] ^= 0x10; return b }, 20, 0, 1},
	{"first record bit flipped", func(b []byte, _ int) []byte { b[len(logMagic)+40] ^= 0x10; return b }, 1, 0, 1},
	{"zeroed", func(b []byte, _ int) []byte { return make([]byte, len(b)) }, 0, 0, 1},
	{"empty", func([]byte, int) []byte { return nil }, 0, 0, 1},
	{"plain JSON", func([]byte, int) []byte { return []byte(`{"session_id":"bad","messages":[]}`) }, 0, 0, 1},
}

// A damaged log is cut at its last good record, or its bad record skipped
// when a good one follows, and never read as data; one without a good
// record is set aside. Nothing else is affected.
func TestFileStoreCorruptSession(t *testing.T) {
	for _, d := range logDamage {
		t.Run(d.name, func(t *testing.T) {
			dir := t.TempDir()
			st := newFileStore(t, dir, Config{})
			mustUpdate(t, st, "bad", func(s *Session) { s.Messages = conversation(20, 200, "bad") })
			path := filepath.Join(dir, sessionsDir, key("bad")+logExt)
			fi, _ := os.Stat(path)
			tail := int(fi.Size())
			mustUpdate(t, st, "bad", func(s *Session) { s.Messages = append(s.Messages, msg("user", "appended")) })
			mustUpdate(t, st, "good", func(s *Session) { s.Messages = conversation(3, 20, "good") })
			data, _ := os.ReadFile(path)
			os.WriteFile(path, d.fn(data, tail), 0o600)

			st2 := newFileStore(t, dir, Config{}) // found at start
			c := st2.Counters()
			if int(c.Torn) != d.torn || int(c.Corrupt) != d.corrupt {
				t.Errorf("Counters: torn %d, corrupt %d; want %d, %d", c.Torn, c.Corrupt, d.torn, d.corrupt)
			}
			s, err := st2.Get(ctx, "bad")
			switch {
			case d.msgs == 0:
				if !errors.Is(err, ErrNotFound) {
					t.Errorf("Get of a session without a good record: %v, want ErrNotFound", err)
				}
				if _, err := os.Stat(path + corruptExt); err != nil {
					t.Errorf("the damaged log was not set aside: %v", err)
				}
			case err != nil:
				t.Fatalf("Get: %v", err)
			case len(s.Messages) != d.msgs:
				t.Errorf("%d messages load, want %d", len(s.Messages), d.msgs)
			}
			list, _ := st2.List(ctx)
			if want := 1 + min(d.msgs, 1); len(list) != want {
				t.Errorf("List = %+v, want %d sessions", list, want)
			}
			mustGet(t, st2, "good")
			mustUpdate(t, st2, "bad", func(s *Session) { s.Messages = append(s.Messages, msg("user", "again")) })
			if s := mustGet(t, newFileStore(t, dir, Config{}), "bad"); len(s.Messages) != d.msgs+1 {
				t.Errorf("after an update and a restart: %d messages, want %d", len(s.Messages), d.msgs+1)
			}
		})
	}
}

// A log holding another session's records (copied or renamed by hand) is
// never handed out under the wrong id.
func TestFileStoreForeignRecord(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{})
	mustUpdate(t, st, "alice", func(s *Session) { s.Messages = []Message{msg("user", "alice's secret")} })
	mustUpdate(t, st, "bob", func(s *Session) { s.Messages = []Message{msg("user", "bob's")} })
	alice, _ := os.ReadFile(filepath.Join(dir, sessionsDir, key("alice")+logExt))
	os.WriteFile(filepath.Join(dir, sessionsDir, key("bob")+logExt), alice, 0o600)
	st2 := newFileStore(t, dir, Config{})
	if s, err := st2.Get(ctx, "bob"); err == nil {
		t.Fatalf("Get(bob) returned %q", s.Messages[0].Content)
	}
	if list, _ := st2.List(ctx); len(list) != 1 || list[0].SessionID != "alice" {
		t.Errorf("List = %+v, want only alice", list)
	}
}

func TestFileStoreRemovesTempFiles(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{})
	mustUpdate(t, st, "s", func(s *Session) {})
	st.SaveSnapshot(ctx, &Snapshot{SessionID: "s"})
	leftovers := []string{
		filepath.Join(dir, sessionsDir, tempPrefix+key("s")+logExt+"-123"),
		filepath.Join(dir, snapsDir, key("s"), tempPrefix+"x"+fileExt+"-456"),
	}
	for _, p := range leftovers {
		os.WriteFile(p, []byte("half a rec"), 0o600)
	}
	newFileStore(t, dir, Config{})
	for _, p := range leftovers {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left after reopening: %v", p, err)
		}
	}
}

// fullDisk fails writes after limit bytes, as a full disk does.
type fullDisk struct {
	*os.File
	limit int
}

func (f *fullDisk) WriteAt(p []byte, off int64) (int, error) {
	if len(p) > f.limit {
		n, _ := f.File.WriteAt(p[:f.limit], off)
		f.limit = 0
		return n, &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	f.limit -= len(p)
	return f.File.WriteAt(p, off)
}

func (f *fullDisk) Write(p []byte) (int, error) {
	if len(p) > f.limit {
		n, _ := f.File.Write(p[:f.limit])
		f.limit = 0
		return n, &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	f.limit -= len(p)
	return f.File.Write(p)
}

// diskFull makes st's writes fail with ENOSPC halfway.
func diskFull(st *FileStore) {
	st.files.createTemp = func(dir, pattern string) (tempFile, error) {
		f, err := os.CreateTemp(dir, pattern)
		if err != nil {
			return nil, err
		}
		return &fullDisk{File: f, limit: 100}, nil
	}
	st.files.openLog = func(path string) (logFile, error) {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		return &fullDisk{File: f, limit: 100}, nil
	}
}

func TestFileStoreDiskFull(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	st, err := NewFileStore(Config{Dir: dir}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, st, "s", func(s *Session) { s.Messages = conversation(10, 300, "before") })
	snap, _ := TakeSnapshot(ctx, st, "s", ReasonManual)
	before := mustGet(t, st, "s")

	diskFull(st)
	err = st.Update(ctx, "s", func(s *Session) error { s.Messages = conversation(10, 300, "after"); return nil })
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Update on a full disk: %v, want ENOSPC", err)
	}
	more := conversation(3, 300, "more")
	err = st.Update(ctx, "s", func(s *Session) error { s.Messages = append(s.Messages, more...); return nil })
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("an appending Update on a full disk: %v, want ENOSPC", err)
	}
	if _, err := TakeSnapshot(ctx, st, "s", ReasonManual); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("SaveSnapshot on a full disk: %v, want ENOSPC", err)
	}
	if c := st.Counters(); c.WriteErrors != 3 {
		t.Errorf("Counters.WriteErrors = %d, want 3", c.WriteErrors)
	}
	// The append that failed halfway left nothing behind in the log.
	if c := newFileStore(t, dir, Config{}).Counters(); c.Torn != 0 || c.Corrupt != 0 {
		t.Errorf("reopened after failed writes: %+v", c)
	}
	if !strings.Contains(logs.String(), "no space left on device") {
		t.Errorf("the failure was not logged:\n%s", logs.String())
	}

	// Reads go on: the old version, the listing, the snapshot.
	if d := diff(before, mustGet(t, st, "s")); d != "" {
		t.Errorf("the session changed on a failed write (-before +after):\n%s", d)
	}
	if list, _ := st.List(ctx); len(list) != 1 || list[0].Snapshots != 1 {
		t.Errorf("List on a full disk = %+v", list)
	}
	if _, err := st.LoadSnapshot(ctx, "s", snap.ID); err != nil {
		t.Errorf("LoadSnapshot on a full disk: %v", err)
	}
	// And no half-written file stays behind.
	for _, d := range []string{filepath.Join(dir, sessionsDir), filepath.Join(dir, snapsDir, key("s"))} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), tempPrefix) {
				t.Errorf("temporary file %s left behind", e.Name())
			}
		}
	}
}

// A directory the process may not write (a read-only mount, wrong owner).
// Root writes anyway, so this runs only as another user; the injected
// full disk above covers the same path for everyone.
func TestFileStoreUnwritableDir(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions")
	}
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{})
	mustUpdate(t, st, "s", func(s *Session) { s.Model = "m" })
	sess := filepath.Join(dir, sessionsDir)
	os.Chmod(sess, 0o500)
	t.Cleanup(func() { os.Chmod(sess, 0o700) })
	if err := st.Update(ctx, "s", func(s *Session) error { s.Model = "n"; return nil }); err == nil {
		t.Error("Update into a read-only directory succeeded")
	}
	if s := mustGet(t, st, "s"); s.Model != "m" {
		t.Errorf("model %q after a failed write", s.Model)
	}
	if c := st.Counters(); c.WriteErrors != 1 {
		t.Errorf("Counters.WriteErrors = %d, want 1", c.WriteErrors)
	}
}

// max_count lowered between runs takes effect when the store opens.
func TestFileStoreRetentionOnOpen(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{MaxCount: 5})
	for i := range 5 {
		st.SaveSnapshot(ctx, &Snapshot{SessionID: "s", Created: t0.Add(time.Duration(i) * time.Second)})
	}
	st2 := newFileStore(t, dir, Config{MaxCount: 2})
	if list, _ := st2.ListSnapshots(ctx, "s"); len(list) != 2 || !list[0].Created.Equal(t0.Add(4*time.Second)) {
		t.Errorf("after reopening with max_count 2: %+v", list)
	}
	files, _ := os.ReadDir(filepath.Join(dir, snapsDir, key("s")))
	if len(files) != 2 {
		t.Errorf("%d snapshot files, want 2", len(files))
	}
}

func TestOpen(t *testing.T) {
	st, err := Open(ctx, Config{Dir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.(*FileStore); !ok {
		t.Errorf("Open with the zero store = %T, want *FileStore", st)
	}
	if _, err := Open(ctx, Config{Store: "s3"}, nil); err == nil {
		t.Error("Open with an unknown store succeeded")
	}
	addr := startRedis(t)
	st, err = Open(ctx, Config{Store: StoreRedis, Redis: RedisConfig{Addr: addr}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, ok := st.(*RedisStore); !ok {
		t.Errorf("Open with store redis = %T, want *RedisStore", st)
	}
}
