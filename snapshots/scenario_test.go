package snapshots

// What a user does with sessions and snapshots, end to end through a
// store, one named test each: snapshots taken, restored, listed, deleted,
// pruned and taken automatically, how they are stored and what a corrupt
// one costs; sessions across restarts; turns accumulated, /clear, export
// and import. TestAtomicWriteSurvivesKill9 is in crash_test.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// A snapshot saves the conversation messages, token count and metadata.
func TestSnapshotSavesMessagesTokensMetadata(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	full := fullSession("s")
	mustUpdate(t, st, "s", func(s *Session) { *s = *full.Clone() })
	info, err := TakeSnapshot(ctx, st, "s", ReasonManual)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := st.LoadSnapshot(ctx, "s", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(full.Messages, snap.Messages); d != "" {
		t.Errorf("messages (-want +got):\n%s", d)
	}
	if snap.Tokens != full.Stats.Tokens || snap.Usage != full.Stats.Usage || snap.Model != full.Model || snap.Reason != ReasonManual {
		t.Errorf("snapshot tokens %d usage %v model %q reason %q", snap.Tokens, snap.Usage, snap.Model, snap.Reason)
	}
	if d := diff(full.Metadata, snap.Metadata); d != "" {
		t.Errorf("metadata (-want +got):\n%s", d)
	}
}

// A write that fails halfway leaves the previous version whole and no
// partial file.
func TestFailedWriteLeavesOldVersion(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{})
	mustUpdate(t, st, "s", func(s *Session) { s.Messages = conversation(30, 500, "old") })
	info, _ := TakeSnapshot(ctx, st, "s", ReasonManual)
	diskFull(st)
	st.Update(ctx, "s", func(s *Session) error { s.Messages = conversation(30, 500, "new"); return nil })
	st.SaveSnapshot(ctx, &Snapshot{SessionID: "s", ID: info.ID, Messages: conversation(30, 500, "new")})

	st2 := newFileStore(t, dir, Config{}) // as after a crash
	if c := st2.Counters(); c.Corrupt != 0 {
		t.Errorf("%d corrupt files after failed writes", c.Corrupt)
	}
	if d := diff(conversation(30, 500, "old"), mustGet(t, st2, "s").Messages); d != "" {
		t.Errorf("session after a failed write (-old +got):\n%s", d)
	}
	snap, err := st2.LoadSnapshot(ctx, "s", info.ID)
	if err != nil || snap.Messages[0].Content != conversation(1, 500, "old")[0].Content {
		t.Errorf("snapshot after a failed overwrite: %v", err)
	}
	if n := countTemp(dir); n != 0 {
		t.Errorf("%d partial files left", n)
	}
}

// A restore loads the saved messages and metadata into the session.
func TestRestoreLoadsMessagesAndMetadata(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	mustUpdate(t, st, "s", func(s *Session) {
		s.Messages = conversation(6, 40, "saved")
		s.Metadata = map[string]any{"topic": "saved"}
		s.Stats.Tokens = 60
	})
	saved, _ := TakeSnapshot(ctx, st, "s", ReasonManual)
	mustUpdate(t, st, "s", func(s *Session) {
		s.Messages = conversation(2, 40, "current")
		s.Metadata = map[string]any{"topic": "current"}
		s.Stats.Tokens = 20
	})
	undo, err := Restore(ctx, st, "s", saved.ID)
	if err != nil {
		t.Fatal(err)
	}
	s := mustGet(t, st, "s")
	if d := diff(conversation(6, 40, "saved"), s.Messages); d != "" {
		t.Errorf("restored messages (-want +got):\n%s", d)
	}
	if s.Metadata["topic"] != "saved" || s.Stats.Tokens != 60 {
		t.Errorf("restored metadata %v, tokens %d", s.Metadata, s.Stats.Tokens)
	}
	// The restore is undoable: what it replaced is a snapshot.
	prev, err := st.LoadSnapshot(ctx, "s", undo.ID)
	if err != nil || prev.Metadata["topic"] != "current" || len(prev.Messages) != 2 {
		t.Errorf("undo snapshot %+v, %v", prev, err)
	}
}

// Listing returns every snapshot with its id, timestamp and token count.
func TestListSnapshotsShowsIDsTimestampsTokens(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	var want []adminapi.SnapshotInfo
	for i, tokens := range []int{1200, 3400, 5600} {
		info, err := st.SaveSnapshot(ctx, &Snapshot{SessionID: "s", Tokens: tokens, Reason: ReasonAuto,
			Created: t0.Add(time.Duration(i) * time.Hour), Messages: conversation(i+1, 10, "x")})
		if err != nil {
			t.Fatal(err)
		}
		want = append([]adminapi.SnapshotInfo{info}, want...)
	}
	got, err := st.ListSnapshots(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("ListSnapshots (-want +got):\n%s", d)
	}
	for i, info := range got {
		if info.ID == "" || !info.Created.Equal(t0.Add(time.Duration(2-i)*time.Hour)) || info.Tokens != []int{5600, 3400, 1200}[i] {
			t.Errorf("entry %d: %+v", i, info)
		}
	}
	// The API shape the admin endpoint will serve.
	j, _ := json.Marshal(got[0])
	if !bytes.Contains(j, []byte(`"id":"`)) || !bytes.Contains(j, []byte(`"created":"2026-01-02T17:04:05.123456789Z"`)) || !bytes.Contains(j, []byte(`"tokens":5600`)) {
		t.Errorf("JSON of a listing entry: %s", j)
	}
}

// Deleting a snapshot removes its file and updates the index.
func TestDeleteSnapshotRemovesFileAndIndex(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{})
	a, _ := st.SaveSnapshot(ctx, &Snapshot{SessionID: "s"})
	b, _ := st.SaveSnapshot(ctx, &Snapshot{SessionID: "s"})
	if err := st.DeleteSnapshot(ctx, "s", a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, snapsDir, key("s"), a.ID+fileExt)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the snapshot file is still there: %v", err)
	}
	for name, s := range map[string]*FileStore{"index": st, "index after restart": newFileStore(t, dir, Config{})} {
		list, _ := s.ListSnapshots(ctx, "s")
		if len(list) != 1 || list[0].ID != b.ID {
			t.Errorf("%s lists %+v, want only %s", name, list, b.ID)
		}
	}
}

// When usage reaches the threshold (80%) a snapshot is taken
// automatically, once per crossing.
func TestAutoSnapshotAtThreshold(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	w := newWriter(t, st, Config{})
	turn := func(usage float64, tag string) {
		w.Update("s", func(s *Session) error {
			s.Messages = append(s.Messages, msg("user", tag))
			s.Stats.Usage = usage
			s.Stats.Tokens = int(usage * 1000)
			return nil
		})
		w.Flush(context.Background())
	}
	for _, u := range []float64{0.10, 0.50, 0.79} {
		turn(u, "below")
	}
	if list, _ := st.ListSnapshots(ctx, "s"); len(list) != 0 {
		t.Fatalf("snapshots below 80%%: %+v", list)
	}
	turn(0.80, "reached")
	turn(0.85, "above") // still above: no second snapshot
	turn(0.95, "above")
	list, _ := st.ListSnapshots(ctx, "s")
	if len(list) != 1 || list[0].Reason != ReasonAuto || list[0].Tokens != 800 || list[0].Messages != 4 {
		t.Fatalf("after crossing 80%%: %+v, want one automatic snapshot of the 4 messages at 800 tokens", list)
	}
	// After a /clear the session can cross again.
	w.Update("s", func(s *Session) error { s.clear(); return nil })
	turn(0.30, "fresh")
	turn(0.81, "again")
	if list, _ := st.ListSnapshots(ctx, "s"); len(list) != 2 {
		t.Errorf("after clearing and crossing again: %d snapshots, want 2", len(list))
	}
	if c := w.Counters(); c.Auto != 2 {
		t.Errorf("Counters.Auto = %d, want 2", c.Auto)
	}
	// A negative threshold turns it off.
	st2 := newFileStore(t, t.TempDir(), Config{})
	w2 := newWriter(t, st2, Config{AutoThreshold: -1})
	w2.Update("s", func(s *Session) error { s.Stats.Usage = 0.99; return nil })
	w2.Flush(context.Background())
	if list, _ := st2.ListSnapshots(ctx, "s"); len(list) != 0 {
		t.Errorf("snapshot taken with auto_threshold -1: %+v", list)
	}
}

// Before the conversation overflows and is cut, the conversation as sent
// is saved (the pre-overflow event), off the request path.
func TestPreOverflowSnapshot(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	g := newGated(st)
	w := newWriter(t, g, Config{})
	sent := conversation(40, 300, "as sent")
	if err := w.SaveSnapshot(&Snapshot{SessionID: "s", Reason: ReasonOverflow, Tokens: 13000, Usage: 1.3, Messages: sent}); err != nil {
		t.Fatal(err)
	}
	// The proxy trims and stores what it forwarded; the overflow snapshot
	// still holds everything.
	w.Update("s", func(s *Session) error { s.Messages = sent[30:]; return nil })
	g.release()
	w.Flush(context.Background())
	list, _ := st.ListSnapshots(ctx, "s")
	if len(list) != 1 || list[0].Reason != ReasonOverflow {
		t.Fatalf("snapshots %+v, want one overflow snapshot", list)
	}
	snap, _ := st.LoadSnapshot(ctx, "s", list[0].ID)
	if d := diff(sent, snap.Messages); d != "" {
		t.Errorf("overflow snapshot (-sent +saved):\n%s", d)
	}
}

// The memory guard's emergency saves the conversation, then clears it; the
// snapshot brings it back.
func TestEmergencySnapshotThenClear(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	mustUpdate(t, st, "s", func(s *Session) {
		s.Messages = conversation(10, 50, "work")
		s.Metadata = map[string]any{"user": "kept"}
	})
	info, err := TakeSnapshot(ctx, st, "s", ReasonEmergency)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Clear(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(ctx, st, "s", info.ID); err != nil {
		t.Fatal(err)
	}
	if s := mustGet(t, st, "s"); len(s.Messages) != 10 || s.Metadata["user"] != "kept" {
		t.Errorf("after recovery: %d messages, metadata %v", len(s.Messages), s.Metadata)
	}
}

// Beyond max_count the oldest snapshots are deleted, files included.
func TestOldestSnapshotsDeletedBeyondMaxCount(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{MaxCount: 4})
	var ids []string
	for i := range 10 {
		info, err := st.SaveSnapshot(ctx, &Snapshot{SessionID: "s", Created: t0.Add(time.Duration(i) * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	list, _ := st.ListSnapshots(ctx, "s")
	var got []string
	for _, info := range list {
		got = append(got, info.ID)
	}
	if d := diff([]string{ids[9], ids[8], ids[7], ids[6]}, got); d != "" {
		t.Errorf("kept (-want +got):\n%s", d)
	}
	files, _ := os.ReadDir(filepath.Join(dir, snapsDir, key("s")))
	if len(files) != 4 {
		t.Errorf("%d snapshot files on disk, want 4", len(files))
	}
	// The default keeps 20.
	st2 := newFileStore(t, t.TempDir(), Config{})
	for range 25 {
		st2.SaveSnapshot(ctx, &Snapshot{SessionID: "s"})
	}
	if list, _ := st2.ListSnapshots(ctx, "s"); len(list) != DefaultMaxCount {
		t.Errorf("default max_count keeps %d, want %d", len(list), DefaultMaxCount)
	}
}

// Snapshots are JSON with compressed message data.
func TestSnapshotIsCompressedJSON(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{})
	msgs := conversation(50, 400, "text")
	info, _ := st.SaveSnapshot(ctx, &Snapshot{SessionID: "s", Messages: msgs, Tokens: 5000})
	data, err := os.ReadFile(filepath.Join(dir, snapsDir, key("s"), info.ID+fileExt))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
		t.Fatal("the snapshot file is not gzip")
	}
	plain, err := gunzip(data)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(plain, []byte("\n")), []byte("\n"))
	var head struct {
		Format string
		Info   adminapi.SnapshotInfo
	}
	var body Snapshot
	if len(lines) != 2 || json.Unmarshal(lines[0], &head) != nil || json.Unmarshal(lines[1], &body) != nil {
		t.Fatalf("uncompressed, the file is not two lines of JSON:\n%.300s", plain)
	}
	if head.Format != formatSnapshot || head.Info.Tokens != 5000 || len(body.Messages) != 50 {
		t.Errorf("header %+v, %d messages", head, len(body.Messages))
	}
	if len(data)*3 > len(plain) {
		t.Errorf("%d bytes stored for %d of JSON: not compressed", len(data), len(plain))
	}
}

// Loading a corrupted snapshot detects and reports it.
func TestCorruptSnapshotDetectedAndReported(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	st, _ := NewFileStore(Config{Dir: dir}, slog.New(slog.NewTextHandler(&logs, nil)))
	info, _ := st.SaveSnapshot(ctx, &Snapshot{SessionID: "s", Messages: conversation(10, 100, "x")})
	path := filepath.Join(dir, snapsDir, key("s"), info.ID+fileExt)
	data, _ := os.ReadFile(path)
	data[len(data)/2] ^= 0xff
	os.WriteFile(path, data, 0o600)

	_, err := st.LoadSnapshot(ctx, "s", info.ID)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), info.ID) {
		t.Errorf("LoadSnapshot of a damaged file: %v, want ErrCorrupt naming the snapshot", err)
	}
	if !strings.Contains(logs.String(), "corrupt") || !strings.Contains(logs.String(), path) {
		t.Errorf("not reported in the log:\n%s", logs.String())
	}
	if c := st.Counters(); c.Corrupt != 1 {
		t.Errorf("Counters.Corrupt = %d", c.Corrupt)
	}
	if _, err := os.Stat(path + corruptExt); err != nil {
		t.Errorf("the damaged file is not kept aside for inspection: %v", err)
	}
}

// Listing comes from cached metadata, not from reading files.
func TestListingFromIndex(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	for i := range 5 {
		mustUpdate(t, st, string(rune('a'+i)), func(s *Session) { s.Messages = conversation(20, 100, "x") })
		TakeSnapshot(ctx, st, string(rune('a'+i)), ReasonManual)
	}
	before := st.Counters().Reads
	for range 10 {
		st.List(ctx)
		st.ListSnapshots(ctx, "c")
	}
	if reads := st.Counters().Reads - before; reads != 0 {
		t.Errorf("listing read %d files", reads)
	}
}

// A large snapshot is saved without blocking the caller.
func TestLargeSnapshotDoesNotBlock(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	g := newGated(st) // the store cannot write at all until released
	w := newWriter(t, g, Config{})
	big := conversation(500, 2000, "big") // 1 MB of text
	// These return while the store is still shut: they only queue.
	if err := w.SaveSnapshot(&Snapshot{SessionID: "s", Reason: ReasonManual, Messages: big}); err != nil {
		t.Fatal(err)
	}
	if err := w.Update("s", func(s *Session) error { s.Messages = big; return nil }); err != nil {
		t.Fatal(err)
	}
	g.release()
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	list, _ := st.ListSnapshots(ctx, "s")
	if len(list) != 1 || list[0].Messages != 500 {
		t.Errorf("large snapshot not saved: %+v", list)
	}
}

// Corrupted snapshot files are skipped and every other snapshot still
// loads.
func TestCorruptSnapshotSkipped(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{MaxCount: 100})
	var good, bad []adminapi.SnapshotInfo
	for i := range len(damage) * 2 {
		info, err := st.SaveSnapshot(ctx, &Snapshot{SessionID: "s", Messages: conversation(8, 200, "snap"), Tokens: i})
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			good = append(good, info)
		} else {
			bad = append(bad, info)
		}
	}
	for i, info := range bad {
		path := filepath.Join(dir, snapsDir, key("s"), info.ID+fileExt)
		data, _ := os.ReadFile(path)
		os.WriteFile(path, damage[i].fn(data), 0o600)
	}
	st2 := newFileStore(t, dir, Config{MaxCount: 100})
	list, _ := st2.ListSnapshots(ctx, "s")
	if len(list) != len(good) {
		t.Errorf("%d snapshots listed, want the %d healthy ones", len(list), len(good))
	}
	for _, info := range good {
		if _, err := st2.LoadSnapshot(ctx, "s", info.ID); err != nil {
			t.Errorf("healthy snapshot %s: %v", info.ID, err)
		}
	}
	for _, info := range bad {
		if _, err := st2.LoadSnapshot(ctx, "s", info.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("corrupt snapshot %s: %v, want it skipped", info.ID, err)
		}
	}
	if c := st2.Counters(); c.Corrupt != uint64(len(bad)) {
		t.Errorf("Counters.Corrupt = %d, want %d", c.Corrupt, len(bad))
	}
}

// A stored session is JSON with session_id, messages (role, content, ISO
// 8601 UTC timestamp, importance, metadata) and metadata.
func TestSessionJSONFormat(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	paris := time.FixedZone("CEST", 2*3600)
	mustUpdate(t, st, "tta-feature-xyz-2025-10-20", func(s *Session) {
		s.Metadata = map[string]any{"project": "tta"}
		s.Messages = []Message{
			{Role: "system", Content: "TTA Architecture Context: ...", Importance: ptr(1.0), Timestamp: time.Date(2025, 10, 20, 11, 0, 0, 0, paris)},
			{Role: "user", Content: "Implement feature X", Importance: ptr(0.9), Metadata: map[string]any{"type": "task_request"},
				Timestamp: time.Date(2025, 10, 20, 11, 1, 0, 0, paris)},
		}
	})
	data, err := EncodeExport(mustGet(t, st, "tta-feature-xyz-2025-10-20"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		SessionID string `json:"session_id"`
		Messages  []struct {
			Role       string         `json:"role"`
			Content    string         `json:"content"`
			Timestamp  string         `json:"timestamp"`
			Importance float64        `json:"importance"`
			Metadata   map[string]any `json:"metadata"`
		} `json:"messages"`
		Metadata map[string]any `json:"metadata"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SessionID != "tta-feature-xyz-2025-10-20" || doc.Metadata["project"] != "tta" || len(doc.Messages) != 2 {
		t.Fatalf("export: %s", data)
	}
	m := doc.Messages[1]
	if m.Role != "user" || m.Content != "Implement feature X" || m.Importance != 0.9 || m.Metadata["type"] != "task_request" {
		t.Errorf("message: %+v", m)
	}
	if m.Timestamp != "2025-10-20T09:01:00Z" {
		t.Errorf("timestamp %q, want ISO 8601 in UTC", m.Timestamp)
	}
}

// A session saved by one store is loaded by a new one on the same
// directory, message and importance intact.
func TestSessionsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{})
	mustUpdate(t, st, "test-persistence", func(s *Session) {
		s.Messages = []Message{{Role: "user", Content: "Test message", Importance: ptr(0.9)}}
	})
	loaded := mustGet(t, newFileStore(t, dir, Config{}), "test-persistence")
	if len(loaded.Messages) != 1 || loaded.Messages[0].Content != "Test message" || *loaded.Messages[0].Importance != 0.9 {
		t.Errorf("after restart: %+v", loaded.Messages)
	}
}

// Metadata, of the session and of each message, is preserved.
func TestMetadataPreserved(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{})
	md := map[string]any{"agent": "Augment", "nested": map[string]any{"n": 1.5, "list": []any{"a", true, nil}}}
	mustUpdate(t, st, "s", func(s *Session) {
		s.Metadata = md
		s.Messages = []Message{{Role: "user", Content: "x", Metadata: map[string]any{"type": "decision"}}}
	})
	got := mustGet(t, newFileStore(t, dir, Config{}), "s")
	if d := diff(md, got.Metadata); d != "" {
		t.Errorf("session metadata (-want +got):\n%s", d)
	}
	if got.Messages[0].Metadata["type"] != "decision" {
		t.Errorf("message metadata %v", got.Messages[0].Metadata)
	}
}

// Adding a turn: the user's message and the agent's response are added as
// turns and available for the next interaction.
func TestAddTurnToContext(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	sent := []Message{msg("user", "What is Go?")}
	s, _ := st.Get(ctx, "repl")
	forward := Accumulate(s, sent)
	if d := diff(sent, forward); d != "" {
		t.Errorf("first turn forwards (-want +got):\n%s", d)
	}
	reply := msg("assistant", "A programming language.")
	mustUpdate(t, st, "repl", func(s *Session) { s.AppendTurn(sent, &reply, t0) })
	got := mustGet(t, st, "repl")
	if len(got.Messages) != 2 || got.Messages[0].Role != "user" || got.Messages[1].Role != "assistant" ||
		!got.Messages[1].Timestamp.Equal(t0) {
		t.Errorf("stored turns: %+v", got.Messages)
	}
	// A failed request (no reply) is not remembered half.
	mustUpdate(t, st, "repl", func(s *Session) { s.AppendTurn([]Message{msg("user", "lost")}, nil, t0) })
	if got := mustGet(t, st, "repl"); len(got.Messages) != 2 {
		t.Errorf("a turn without a reply was stored: %d messages", len(got.Messages))
	}
}

// The full context: with 5 accumulated turns, the next prompt includes all
// 5, in order, each with its role.
func TestRetrieveFullContext(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	for i := range 5 {
		sent := []Message{msg("user", "question "+string(rune('1'+i)))}
		reply := msg("assistant", "answer "+string(rune('1'+i)))
		mustUpdate(t, st, "s", func(s *Session) { s.AppendTurn(sent, &reply, t0.Add(time.Duration(i)*time.Minute)) })
	}
	next := []Message{msg("user", "question 6")}
	prompt := Accumulate(mustGet(t, st, "s"), next)
	var got []string
	for _, m := range prompt {
		got = append(got, m.Role+": "+m.Content)
	}
	want := []string{
		"user: question 1", "assistant: answer 1", "user: question 2", "assistant: answer 2",
		"user: question 3", "assistant: answer 3", "user: question 4", "assistant: answer 4",
		"user: question 5", "assistant: answer 5", "user: question 6",
	}
	if d := diff(want, got); d != "" {
		t.Errorf("prompt (-want +got):\n%s", d)
	}
}

// /clear removes every turn, the next prompt starts fresh, and the session
// metadata is preserved.
func TestClearKeepsMetadata(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	reply := msg("assistant", "hi")
	mustUpdate(t, st, "s", func(s *Session) {
		s.Metadata = map[string]any{"agent": "coder", "started": "2026-01-02"}
		s.AppendTurn([]Message{msg("user", "hello")}, &reply, t0)
		s.Stats = Stats{Tokens: 10, Usage: 0.5, Requests: 1}
	})
	if err := st.Clear(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	s := mustGet(t, st, "s")
	next := []Message{msg("user", "new topic")}
	if d := diff(next, Accumulate(s, next)); d != "" {
		t.Errorf("prompt after /clear carries history (-want +got):\n%s", d)
	}
	if s.Metadata["agent"] != "coder" || s.Metadata["started"] != "2026-01-02" {
		t.Errorf("metadata after /clear: %v", s.Metadata)
	}
	if s.Stats.Tokens != 0 || s.Stats.Usage != 0 {
		t.Errorf("stats after /clear: %+v", s.Stats)
	}
}

// An export holds every turn, with session_id and timestamps, as a JSON
// array of turn objects.
func TestExportContextToJSON(t *testing.T) {
	s := &Session{ID: "repl-1", Metadata: map[string]any{"agent": "coder"}, Created: t0, Updated: t0.Add(time.Hour)}
	reply := msg("assistant", "4")
	s.AppendTurn([]Message{msg("user", "2+2?")}, &reply, t0.Add(time.Minute))
	data, err := EncodeExport(s)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "export-turn.golden", data)
}

// An import: its turns are loaded into the current session and later
// interactions include them.
func TestImportContextFromJSON(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	data, err := os.ReadFile("testdata/export-turn.golden")
	if err != nil {
		t.Fatal(err)
	}
	n, _, err := Import(ctx, st, "current", data)
	if err != nil || n != 2 {
		t.Fatalf("Import = %d, %v", n, err)
	}
	s := mustGet(t, st, "current")
	if s.Metadata["agent"] != "coder" {
		t.Errorf("imported metadata %v", s.Metadata)
	}
	prompt := Accumulate(s, []Message{msg("user", "and 3+3?")})
	if len(prompt) != 3 || prompt[0].Content != "2+2?" || prompt[1].Content != "4" {
		t.Errorf("next prompt does not include the imported turns: %+v", prompt)
	}
}
