package snapshots

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The tests here write a session as a first record of two messages and
// then turns of two messages each, one record per turn, and damage one
// record in the middle of the log.
const (
	recoverTurns = 8
	lostTurn     = 3 // the turn whose record is damaged
)

// writeTurns writes session id to st: the first record and recoverTurns
// turns. Turn lostTurn also changes the metadata, which no later turn
// does. It returns the log's size after each record (FileStore; nil for
// another store).
func writeTurns(t *testing.T, st Store, id string) (ends []int64) {
	t.Helper()
	size := func() {
		if fs, ok := st.(*FileStore); ok {
			fi, err := os.Stat(fs.logPath(key(id)))
			if err != nil {
				t.Fatal(err)
			}
			ends = append(ends, fi.Size())
		}
	}
	mustUpdate(t, st, id, func(s *Session) {
		s.Model = "m"
		s.Metadata = map[string]any{"topic": "first"}
		s.Messages = []Message{msg("system", "be brief"), msg("user", "hello")}
	})
	size()
	for i := 1; i <= recoverTurns; i++ {
		mustUpdate(t, st, id, func(s *Session) {
			s.Messages = append(s.Messages, msg("assistant", fmt.Sprintf("answer %d", i)), msg("user", fmt.Sprintf("question %d", i)))
			s.Stats.Requests = i
			if i == lostTurn {
				s.Metadata = map[string]any{"topic": "changed by the lost turn"}
			}
		})
		size()
	}
	return ends
}

// checkRecovered checks session id as read after the record of lostTurn
// was skipped: every other turn is there, in order, and what the lost
// turn alone changed is not.
func checkRecovered(t *testing.T, s *Session, extra ...string) {
	t.Helper()
	want := []string{"be brief", "hello"}
	for i := 1; i <= recoverTurns; i++ {
		if i != lostTurn {
			want = append(want, fmt.Sprintf("answer %d", i), fmt.Sprintf("question %d", i))
		}
	}
	want = append(want, extra...)
	var got []string
	for _, m := range s.Messages {
		got = append(got, m.Content)
	}
	if !slices.Equal(got, want) {
		t.Errorf("messages after the lost record:\n got %q\nwant %q", got, want)
	}
	if s.Metadata["topic"] != "first" || s.Stats.Requests != recoverTurns || s.Model != "m" {
		t.Errorf("fields after the lost record: metadata %v, requests %d, model %q; want the first record's "+
			"metadata, the last turn's requests (%d), model m", s.Metadata, s.Stats.Requests, s.Model, recoverTurns)
	}
}

// recordsOf returns the kinds of the records in a session log, failing
// the test on anything that is not a whole record.
func recordsOf(t *testing.T, data []byte) string {
	t.Helper()
	if !bytes.HasPrefix(data, []byte(logMagic)) {
		t.Fatal("not a session log")
	}
	var kinds []byte
	for b := data[len(logMagic):]; ; {
		p, n, state := nextFrame(b)
		switch state {
		case frameEnd:
			return string(kinds)
		case frameOK:
			kinds = append(kinds, p[0])
			b = b[n:]
		default:
			t.Fatalf("the log holds a bad frame (%d) after %q", state, kinds)
		}
	}
}

// copiesOf returns the copies kept of the log at path.
func copiesOf(t *testing.T, path string) []string {
	t.Helper()
	m, err := filepath.Glob(path + corruptExt + "*")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// midDamage are ways one record in the middle of a log goes bad; each
// gets the log and where the record starts and ends.
var midDamage = []struct {
	name string
	fn   func(b []byte, start, end int)
}{
	// A length field pointing past the end used to look like a torn
	// write: the log was cut there (3,808 bytes to 1,391 in the
	// finding), and every later turn was lost with no copy kept.
	{"length beyond the end", func(b []byte, start, _ int) { binary.LittleEndian.PutUint32(b[start:], uint32(len(b))) }},
	{"length beyond the frame limit", func(b []byte, start, _ int) { binary.LittleEndian.PutUint32(b[start:], 0xfffffff0) }},
	{"length into the next record", func(b []byte, start, end int) {
		binary.LittleEndian.PutUint32(b[start:], uint32(end-start-frameHeader+11))
	}},
	{"length short", func(b []byte, start, end int) {
		binary.LittleEndian.PutUint32(b[start:], uint32(end-start-frameHeader-11))
	}},
	{"crc flipped", func(b []byte, start, _ int) { b[start+5] ^= 0x01 }},
	{"payload bit flipped", func(b []byte, start, end int) { b[(start+end)/2] ^= 0x10 }},
	{"record zeroed", func(b []byte, start, end int) { clear(b[start:end]) }},
}

// A record damaged in the middle of a log is set aside, not taken for a
// torn tail: a copy of the log as it was is kept, every later turn loads,
// only the damaged turn is missing, the log is rewritten whole, and the
// next read finds nothing wrong. Found when the store opens or when the
// session is first read.
func TestFileStoreCorruptRecordMidLog(t *testing.T) {
	for _, d := range midDamage {
		for _, found := range []string{"at start", "on read"} {
			t.Run(d.name+" "+found, func(t *testing.T) {
				dir := t.TempDir()
				ends := writeTurns(t, newFileStore(t, dir, Config{}), "s")
				mustUpdate(t, newFileStore(t, dir, Config{}), "other", func(s *Session) { s.Messages = []Message{msg("user", "x")} })
				path := filepath.Join(dir, sessionsDir, key("s")+logExt)
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if kinds := recordsOf(t, data); kinds != "R"+strings.Repeat("A", recoverTurns) {
					t.Fatalf("the log holds %q before the damage", kinds)
				}
				start, end := int(ends[lostTurn-1]), int(ends[lostTurn])
				d.fn(data, start, end)

				var logs bytes.Buffer
				open := func() *FileStore {
					st, err := NewFileStore(Config{Dir: dir}, slog.New(slog.NewTextHandler(&logs, nil)))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { st.Close() })
					return st
				}
				var st *FileStore
				if found == "at start" {
					os.WriteFile(path, data, 0o600)
					st = open()
				} else {
					st = open()
					os.WriteFile(path, data, 0o600)
				}
				checkRecovered(t, mustGet(t, st, "s"))
				mustGet(t, st, "other")

				c := st.Counters()
				if c.Corrupt != 1 || c.Skipped != 1 || c.Torn != 0 {
					t.Errorf("Counters: corrupt %d, skipped %d, torn %d; want 1, 1, 0", c.Corrupt, c.Skipped, c.Torn)
				}
				copies := copiesOf(t, path)
				if len(copies) != 1 {
					t.Fatalf("copies of the damaged log: %q, want one", copies)
				}
				if kept, _ := os.ReadFile(copies[0]); !bytes.Equal(kept, data) {
					t.Errorf("the copy (%d bytes) is not the damaged log as it was (%d bytes)", len(kept), len(data))
				}
				out := logs.String()
				for _, want := range []string{"level=ERROR", path, fmt.Sprintf("offset=[%d]", start), "copy=" + copies[0],
					fmt.Sprintf("kept=%d", recoverTurns-lostTurn)} {
					if !strings.Contains(out, want) {
						t.Errorf("the log does not say %q:\n%s", want, out)
					}
				}
				now, _ := os.ReadFile(path)
				if kinds := recordsOf(t, now); kinds != "R" {
					t.Errorf("the log holds %q after the repair, want one replace record", kinds)
				}
				if list, _ := st.List(ctx); len(list) != 2 {
					t.Errorf("List = %+v, want both sessions", list)
				}

				// Read again from the start: nothing is corrupt, nothing
				// new is set aside, and the session goes on.
				again := newFileStore(t, dir, Config{})
				checkRecovered(t, mustGet(t, again, "s"))
				if c := again.Counters(); c.Corrupt != 0 || c.Skipped != 0 || c.Torn != 0 {
					t.Errorf("a second read counts corrupt %d, skipped %d, torn %d", c.Corrupt, c.Skipped, c.Torn)
				}
				mustUpdate(t, again, "s", func(s *Session) { s.Messages = append(s.Messages, msg("assistant", "after")) })
				checkRecovered(t, mustGet(t, newFileStore(t, dir, Config{}), "s"), "after")
				if n := len(copiesOf(t, path)); n != 1 {
					t.Errorf("%d copies after more reads, want the one", n)
				}
			})
		}
	}
}

// Two damaged records, the first a replace record: the turns after each
// are kept, on an empty session of the same id when nothing before them
// loads.
func TestFileStoreCorruptFirstAndMiddle(t *testing.T) {
	dir := t.TempDir()
	ends := writeTurns(t, newFileStore(t, dir, Config{}), "s")
	path := filepath.Join(dir, sessionsDir, key("s")+logExt)
	data, _ := os.ReadFile(path)
	binary.LittleEndian.PutUint32(data[len(logMagic):], uint32(len(data))) // the first record
	data[ends[lostTurn+1]-3] ^= 0x10                                       // the record of lostTurn+1
	os.WriteFile(path, data, 0o600)

	st := newFileStore(t, dir, Config{})
	s := mustGet(t, st, "s")
	var got []string
	for _, m := range s.Messages {
		got = append(got, m.Content)
	}
	var want []string
	for i := 1; i <= recoverTurns; i++ {
		if i != lostTurn+1 {
			want = append(want, fmt.Sprintf("answer %d", i), fmt.Sprintf("question %d", i))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("messages:\n got %q\nwant %q", got, want)
	}
	if s.ID != "s" || s.Model != "m" || s.Created.IsZero() || s.Stats.Requests != recoverTurns {
		t.Errorf("session %q, model %q, created %v, requests %d", s.ID, s.Model, s.Created, s.Stats.Requests)
	}
	if c := st.Counters(); c.Corrupt != 2 || c.Skipped != 2 {
		t.Errorf("Counters: corrupt %d, skipped %d; want 2, 2", c.Corrupt, c.Skipped)
	}
	if copies := copiesOf(t, path); len(copies) != 1 {
		t.Errorf("copies: %q, want one", copies)
	}
}

// A tail with nothing valid after it is cut as before: a torn write (a
// partial last record, its header cut short, zeros after it, or a length
// field past the end in the last record) is only cut and counted as torn,
// nothing set aside; a whole last record that fails its CRC is cut and
// the log copied first.
func TestFileStoreTailsStillCut(t *testing.T) {
	for _, tc := range []struct {
		name          string
		fn            func(b []byte, last int) []byte
		msgs          int // turns that load
		torn, corrupt uint64
		copied        bool // a copy of the log is kept
	}{
		{"partial last record", func(b []byte, _ int) []byte { return b[:len(b)-10] }, recoverTurns - 1, 1, 0, false},
		{"last header cut short", func(b []byte, last int) []byte { return b[:last+5] }, recoverTurns - 1, 1, 0, false},
		{"zeros after", func(b []byte, _ int) []byte { return append(b, make([]byte, 4096)...) }, recoverTurns, 1, 0, false},
		{"last length past the end", func(b []byte, last int) []byte {
			binary.LittleEndian.PutUint32(b[last:], uint32(len(b)))
			return b
		}, recoverTurns - 1, 1, 0, false},
		{"last record bit flipped", func(b []byte, _ int) []byte { b[len(b)-3] ^= 0x10; return b }, recoverTurns - 1, 0, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ends := writeTurns(t, newFileStore(t, dir, Config{}), "s")
			path := filepath.Join(dir, sessionsDir, key("s")+logExt)
			data, _ := os.ReadFile(path)
			last := int(ends[len(ends)-2])
			data = tc.fn(data, last)
			os.WriteFile(path, data, 0o600)

			st := newFileStore(t, dir, Config{})
			s := mustGet(t, st, "s")
			if want := 2 + 2*tc.msgs; len(s.Messages) != want {
				t.Errorf("%d messages load, want %d", len(s.Messages), want)
			}
			c := st.Counters()
			if c.Torn != tc.torn || c.Corrupt != tc.corrupt || c.Skipped != 0 {
				t.Errorf("Counters: torn %d, corrupt %d, skipped %d; want %d, %d, 0", c.Torn, c.Corrupt, c.Skipped, tc.torn, tc.corrupt)
			}
			copies := copiesOf(t, path)
			switch {
			case !tc.copied && len(copies) > 0:
				t.Errorf("a torn tail was set aside: %q", copies)
			case tc.copied && len(copies) != 1:
				t.Errorf("copies of a log with a corrupt tail: %q, want one", copies)
			case tc.copied:
				if kept, _ := os.ReadFile(copies[0]); !bytes.Equal(kept, data) {
					t.Error("the copy is not the log as it was")
				}
			}
			now, _ := os.ReadFile(path)
			wantLen := last
			if tc.msgs == recoverTurns {
				wantLen = int(ends[len(ends)-1])
			}
			if len(now) != wantLen {
				t.Errorf("the log is %d bytes after the cut, want %d (its last good record)", len(now), wantLen)
			}
			recordsOf(t, now)
		})
	}
}

// resync checksums a bounded number of bytes: a log full of look-alikes
// (frame headers before a listing entry, each claiming the rest of the
// log) spends the budget and is treated as having nothing valid after
// the damage, instead of costing a CRC of the rest of the log at each.
func TestResyncBounded(t *testing.T) {
	p, err := encodeReplace(&Session{ID: "s", Messages: []Message{msg("user", "hello")}})
	if err != nil {
		t.Fatal(err)
	}
	whole := frame(p)
	const fakes = 2000
	look := append([]byte{0, 0, 0, 0, 0, 0, 0, 0, 'A'}, `{"session_id":"s"}`+"\n{}"...)
	b := bytes.Repeat(look, fakes)
	for i := range fakes {
		at := i * len(look)
		binary.LittleEndian.PutUint32(b[at:], uint32(len(b)+len(whole)-at-frameHeader))
	}
	b = append(b, whole...)
	ours := func(ib []byte) bool { m, err := infoIs(ib, "s"); return err == nil && m }

	budget := resyncBudget(b)
	if at := resync(b, 1, ours, &budget); at != -1 {
		t.Errorf("resync found a record at %d past %d look-alikes, want it to give up", at, fakes)
	}
	budget = 1 << 40
	if at := resync(b, 1, ours, &budget); at != len(b)-len(whole) {
		t.Errorf("resync without a bound: %d, want the whole record at %d", at, len(b)-len(whole))
	}
}
