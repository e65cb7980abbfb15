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
		if d.Type().IsRegular() && !strings.HasSuffix(rel, fileExt) {
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
			if part != "." && part != sessionsDir && part != snapsDir && !isKey(base) && checkSnapID(base) != nil {
				t.Errorf("path %q has a part %q that is neither a hash nor a snapshot id", name, part)
			}
		}
	}
}

// Seed 003 wants a human-readable format: the uncompressed record is two
// lines of JSON (header with the listing entry, then the session).
func TestFileStoreRecordFormat(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{})
	mustUpdate(t, st, "golden", func(s *Session) {
		*s = *fullSession("golden")
		s.Created = time.Time{}
	})
	data, err := os.ReadFile(filepath.Join(dir, sessionsDir, key("golden")+fileExt))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := gunzip(data)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "session-v1.golden", plain)

	// A record written by this version must load in later ones: keep a
	// compressed copy to decode forever (rewritten only with -update).
	fixture := filepath.Join("testdata", "session-v1.json.gz")
	if *update {
		os.WriteFile(fixture, data, 0o644)
	}
	old, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	s, err := readSession(old, "golden")
	if err != nil {
		t.Fatalf("a version 1 record no longer loads: %v", err)
	}
	want := fullSession("golden")
	want.Created, want.Updated = s.Created, s.Updated
	if d := diff(want, s); d != "" {
		t.Errorf("version 1 record (-want +got):\n%s", d)
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

func TestFileStoreCorruptSession(t *testing.T) {
	for _, d := range damage {
		t.Run(d.name, func(t *testing.T) {
			dir := t.TempDir()
			st := newFileStore(t, dir, Config{})
			mustUpdate(t, st, "bad", func(s *Session) { s.Messages = conversation(20, 200, "bad") })
			mustUpdate(t, st, "good", func(s *Session) { s.Messages = conversation(3, 20, "good") })
			path := filepath.Join(dir, sessionsDir, key("bad")+fileExt)
			data, _ := os.ReadFile(path)
			os.WriteFile(path, d.fn(data), 0o600)

			// Found while running.
			if _, err := st.Get(ctx, "bad"); !isCorrupt(err) {
				t.Errorf("Get: %v, want ErrCorrupt", err)
			}
			if _, err := os.Stat(path + corruptExt); err != nil {
				t.Errorf("the corrupt file was not set aside: %v", err)
			}
			if _, err := st.Get(ctx, "bad"); !errors.Is(err, ErrNotFound) {
				t.Errorf("second Get: %v, want ErrNotFound", err)
			}

			// Found at start.
			os.Rename(path+corruptExt, path)
			st2 := newFileStore(t, dir, Config{})
			list, _ := st2.List(ctx)
			if len(list) != 1 || list[0].ID != "good" {
				t.Errorf("List after reopening with a corrupt session = %+v, want only good", list)
			}
			if c := st2.Counters(); c.Corrupt != 1 {
				t.Errorf("Counters.Corrupt = %d, want 1", c.Corrupt)
			}
			mustGet(t, st2, "good")
			mustUpdate(t, st2, "bad", func(s *Session) { s.Messages = []Message{msg("user", "again")} })
			if s := mustGet(t, st2, "bad"); len(s.Messages) != 1 {
				t.Errorf("the session is not usable again: %d messages", len(s.Messages))
			}
		})
	}
}

// A file holding another session's record (copied or renamed by hand) is
// never handed out under the wrong id.
func TestFileStoreForeignRecord(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{})
	mustUpdate(t, st, "alice", func(s *Session) { s.Messages = []Message{msg("user", "alice's secret")} })
	mustUpdate(t, st, "bob", func(s *Session) { s.Messages = []Message{msg("user", "bob's")} })
	alice, _ := os.ReadFile(filepath.Join(dir, sessionsDir, key("alice")+fileExt))
	os.WriteFile(filepath.Join(dir, sessionsDir, key("bob")+fileExt), alice, 0o600)
	if s, err := st.Get(ctx, "bob"); err == nil {
		t.Fatalf("Get(bob) returned %q", s.Messages[0].Content)
	}
}

func TestFileStoreRemovesTempFiles(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{})
	mustUpdate(t, st, "s", func(s *Session) {})
	st.SaveSnapshot(ctx, &Snapshot{SessionID: "s"})
	leftovers := []string{
		filepath.Join(dir, sessionsDir, tempPrefix+key("s")+fileExt+"-123"),
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
	st.createTemp = func(dir, pattern string) (tempFile, error) {
		f, err := os.CreateTemp(dir, pattern)
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
	if _, err := TakeSnapshot(ctx, st, "s", ReasonManual); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("SaveSnapshot on a full disk: %v, want ENOSPC", err)
	}
	if c := st.Counters(); c.WriteErrors != 2 {
		t.Errorf("Counters.WriteErrors = %d, want 2", c.WriteErrors)
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
