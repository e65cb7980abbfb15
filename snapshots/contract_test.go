package snapshots

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// opener opens a store on one backing (a directory, a Redis prefix): each
// call is the same data seen by a fresh process, so calling it again is a
// restart. The store is closed by t.Cleanup.
type opener func(t *testing.T, cfg Config) Store

// testContract runs the Store contract against a kind of store; fresh
// returns an opener on new, empty backing.
func testContract(t *testing.T, fresh func(t *testing.T) opener) {
	tests := []struct {
		name string
		run  func(t *testing.T, open opener)
	}{
		{"GetMissing", contractGetMissing},
		{"RoundTrip", contractRoundTrip},
		{"RawBytesKept", contractRawBytesKept},
		{"OpaqueIDs", contractOpaqueIDs},
		{"InvalidIDs", contractInvalidIDs},
		{"ConcurrentUpdates", contractConcurrentUpdates},
		{"UpdateErrorChangesNothing", contractUpdateError},
		{"UnsavableChangeRefused", contractUnsavable},
		{"Clear", contractClear},
		{"Delete", contractDelete},
		{"List", contractList},
		{"Snapshots", contractSnapshots},
		{"SnapshotIDs", contractSnapshotIDs},
		{"Retention", contractRetention},
		{"Restart", contractRestart},
		{"Restore", contractRestore},
		{"Import", contractImport},
		{"Counters", contractCounters},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, fresh(t)) })
	}
}

var ctx = context.Background()

func mustUpdate(t testing.TB, st Store, id string, fn func(*Session)) {
	t.Helper()
	if err := st.Update(ctx, id, func(s *Session) error { fn(s); return nil }); err != nil {
		t.Fatalf("Update(%q): %v", id, err)
	}
}

func mustGet(t testing.TB, st Store, id string) *Session {
	t.Helper()
	s, err := st.Get(ctx, id)
	if err != nil {
		t.Fatalf("Get(%q): %v", id, err)
	}
	return s
}

func contractGetMissing(t *testing.T, open opener) {
	st := open(t, Config{})
	if _, err := st.Get(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of a missing session: %v, want ErrNotFound", err)
	}
	if _, err := st.LoadSnapshot(ctx, "nobody", "20260102-150405-000000"); !errors.Is(err, ErrNotFound) {
		t.Errorf("LoadSnapshot of a missing snapshot: %v, want ErrNotFound", err)
	}
	infos, err := st.ListSnapshots(ctx, "nobody")
	if err != nil || len(infos) != 0 {
		t.Errorf("ListSnapshots of a session without any = %v, %v; want none", infos, err)
	}
}

// fullSession is a session with every field set.
func fullSession(id string) *Session {
	msgs := conversation(6, 80, "v1")
	msgs[0].Role, msgs[0].Raw = "system", []byte(`{"role":"system","content":"be brief"}`)
	msgs[0].Content = "be brief"
	msgs[1].Importance = ptr(0.0) // set to 0, not unset
	msgs[2].Importance = ptr(0.9)
	msgs[2].Metadata = map[string]any{"type": "task_request", "n": 3.0}
	msgs[3].Raw = nil // built by ctxproxy
	msgs[4].Preserve = true
	return &Session{
		ID:    id,
		Model: "llama3.1:8b",
		Stats: Stats{Tokens: 1234, Limit: 8192, Usage: 0.15, Sent: 1000, NumCtx: 8192, Dropped: 2, Summarized: 1,
			PromptTokens: 1200, CompletionTokens: 50, Requests: 7, Truncations: 1, LastTruncation: t0},
		Metadata:  map[string]any{"agent": "test", "tags": []any{"a", "b"}},
		Summaries: []Summary{{Key: "abc", Covers: 4, Text: "They talked.", Tokens: 3, Created: t0}},
		Messages:  msgs,
	}
}

func contractRoundTrip(t *testing.T, open opener) {
	st := open(t, Config{})
	want := fullSession("s1")
	mustUpdate(t, st, "s1", func(s *Session) {
		created := s.Created
		*s = *want.Clone()
		s.Created = created
	})
	got := mustGet(t, st, "s1")
	if got.Created.IsZero() || got.Updated.Before(got.Created) || got.Updated.Location() != time.UTC {
		t.Errorf("Created %v, Updated %v: want set by the store, in UTC", got.Created, got.Updated)
	}
	want.Created, want.Updated = got.Created, got.Updated
	if d := diff(want, got); d != "" {
		t.Errorf("Get after Update (-want +got):\n%s", d)
	}
	if got.Messages[1].Importance == nil || *got.Messages[1].Importance != 0 || got.Messages[5].Importance != nil {
		t.Error("importance 0 and unset importance must stay distinct")
	}

	// A second update sees the first one's state.
	mustUpdate(t, st, "s1", func(s *Session) { s.Stats.Requests++ })
	if got := mustGet(t, st, "s1"); got.Stats.Requests != 8 || len(got.Messages) != 6 || !got.Created.Equal(want.Created) {
		t.Errorf("after a second update: requests %d, %d messages, created %v", got.Stats.Requests, len(got.Messages), got.Created)
	}
}

func contractRawBytesKept(t *testing.T, open opener) {
	st := open(t, Config{})
	// Spacing, key order, escapes and characters encoding/json would
	// rewrite (<, >, &, U+2028) must come back byte for byte.
	raws := []string{
		`{ "role" : "user",  "content": "a < b && c > d",
  "images": ["aGVsbG8="], "x-unknown": {"n": 1.50e3} }`,
		`{"content":"\u00e9t\u00e9 \u2028 line","role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]}`,
		`{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}`,
	}
	var msgs []Message
	for _, r := range raws {
		msgs = append(msgs, Message{Role: "user", Content: "x", Raw: []byte(r)})
	}
	mustUpdate(t, st, "raw", func(s *Session) { s.Messages = msgs })
	got := mustGet(t, st, "raw")
	for i, r := range raws {
		if string(got.Messages[i].Raw) != r {
			t.Errorf("message %d raw:\n got %s\nwant %s", i, got.Messages[i].Raw, r)
		}
	}
}

// opaqueIDs are session ids that must all be distinct sessions: several
// of them collide once naively sanitized for a file name ("a/b", "a_b",
// "a b", "a\x00b" all become "a_b").
var opaqueIDs = []string{
	"a/b", "a_b", "a b", "a\x00b", "a\\b", "a:b", "a..b", "A_B",
	"..", ".", "../../etc/passwd", "/abs/path", "sessions/x", " lead and trail ",
	"emoji 🧪🚀", "日本語のセッション", "CON", "nul", "-rf", "x.json.gz",
	"%2e%2e%2f", "tab\tnew\nline", "ctxproxy:session:x", strings.Repeat("z", MaxIDLen),
}

func contractOpaqueIDs(t *testing.T, open opener) {
	st := open(t, Config{})
	for i, id := range opaqueIDs {
		mustUpdate(t, st, id, func(s *Session) {
			s.Messages = []Message{msg("user", fmt.Sprintf("I am session %d", i))}
			s.Metadata = map[string]any{"i": float64(i)}
		})
		if _, err := st.SaveSnapshot(ctx, &Snapshot{SessionID: id, Reason: ReasonManual, Tokens: i}); err != nil {
			t.Fatalf("SaveSnapshot(%q): %v", id, err)
		}
	}
	for i, id := range opaqueIDs {
		s := mustGet(t, st, id)
		if s.ID != id || s.Messages[0].Content != fmt.Sprintf("I am session %d", i) || s.Metadata["i"] != float64(i) {
			t.Errorf("Get(%q) returned id %q, %q: another session's data", id, s.ID, s.Messages[0].Content)
		}
		infos, err := st.ListSnapshots(ctx, id)
		if err != nil || len(infos) != 1 || infos[0].Tokens != i || infos[0].SessionID != id {
			t.Errorf("ListSnapshots(%q) = %+v, %v", id, infos, err)
		}
	}
	list, err := st.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, info := range list {
		ids = append(ids, info.SessionID)
	}
	slices.Sort(ids)
	want := slices.Sorted(slices.Values(opaqueIDs))
	if d := diff(want, ids); d != "" {
		t.Errorf("List ids (-want +got):\n%s", d)
	}
}

func contractInvalidIDs(t *testing.T, open opener) {
	st := open(t, Config{})
	for name, id := range map[string]string{
		"empty":    "",
		"too long": strings.Repeat("x", MaxIDLen+1),
		"not utf8": "a\xffb",
	} {
		t.Run(name, func(t *testing.T) {
			calls := map[string]error{
				"Get":            second(st.Get(ctx, id)),
				"Update":         st.Update(ctx, id, func(*Session) error { return nil }),
				"Clear":          st.Clear(ctx, id),
				"Delete":         st.Delete(ctx, id),
				"SaveSnapshot":   second(st.SaveSnapshot(ctx, &Snapshot{SessionID: id})),
				"ListSnapshots":  second(st.ListSnapshots(ctx, id)),
				"LoadSnapshot":   second(st.LoadSnapshot(ctx, id, "x")),
				"DeleteSnapshot": st.DeleteSnapshot(ctx, id, "x"),
			}
			for call, err := range calls {
				if !errors.Is(err, ErrInvalidID) {
					t.Errorf("%s: %v, want ErrInvalidID", call, err)
				}
			}
		})
	}
	if list, _ := st.List(ctx); len(list) != 0 {
		t.Errorf("invalid ids created sessions: %+v", list)
	}
}

func second[T any](_ T, err error) error { return err }

func contractConcurrentUpdates(t *testing.T, open opener) {
	st := open(t, Config{})
	const n = 100
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			err := st.Update(ctx, "busy", func(s *Session) error {
				s.Stats.Requests++
				s.Messages = append(s.Messages, msg("user", fmt.Sprint(i)))
				return nil
			})
			if err != nil {
				t.Errorf("update %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	s := mustGet(t, st, "busy")
	seen := map[string]bool{}
	for _, m := range s.Messages {
		seen[m.Content] = true
	}
	if s.Stats.Requests != n || len(s.Messages) != n || len(seen) != n {
		t.Errorf("after %d concurrent updates: requests %d, %d messages (%d distinct)", n, s.Stats.Requests, len(s.Messages), len(seen))
	}
}

func contractUpdateError(t *testing.T, open opener) {
	st := open(t, Config{})
	boom := errors.New("boom")
	if err := st.Update(ctx, "new", func(s *Session) error { s.Model = "m"; return boom }); !errors.Is(err, boom) {
		t.Errorf("Update returned %v, want fn's error", err)
	}
	if _, err := st.Get(ctx, "new"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a failed update created the session: %v", err)
	}
	mustUpdate(t, st, "old", func(s *Session) { s.Model = "before" })
	st.Update(ctx, "old", func(s *Session) error { s.Model = "after"; return boom })
	if got := mustGet(t, st, "old"); got.Model != "before" {
		t.Errorf("a failed update changed the session: model %q", got.Model)
	}
}

func contractUnsavable(t *testing.T, open opener) {
	st := open(t, Config{})
	mustUpdate(t, st, "s", func(s *Session) { s.Messages = []Message{msg("user", "kept")} })
	for name, m := range map[string]Message{
		"raw not JSON":      {Role: "user", Raw: []byte(`{"role":`)},
		"raw not an object": {Role: "user", Raw: []byte(`"text"`)},
		"importance > 1":    {Role: "user", Importance: ptr(1.5)},
		"metadata not JSON": {Role: "user", Metadata: map[string]any{"f": func() {}}},
	} {
		err := st.Update(ctx, "s", func(s *Session) error { s.Messages = append(s.Messages, m); return nil })
		if err == nil {
			t.Errorf("%s: Update succeeded; a record that cannot be read back must be refused", name)
		}
	}
	if got := mustGet(t, st, "s"); len(got.Messages) != 1 {
		t.Errorf("refused updates changed the session: %d messages", len(got.Messages))
	}
}

func contractClear(t *testing.T, open opener) {
	st := open(t, Config{})
	if err := st.Clear(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Clear of a missing session: %v, want ErrNotFound", err)
	}
	full := fullSession("c")
	mustUpdate(t, st, "c", func(s *Session) { *s = *full.Clone() })
	if err := st.Clear(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, st, "c")
	if len(got.Messages) != 0 || len(got.Summaries) != 0 || got.Stats != (Stats{}) {
		t.Errorf("after Clear: %d messages, %d summaries, stats %+v; want none", len(got.Messages), len(got.Summaries), got.Stats)
	}
	if d := diff(full.Metadata, got.Metadata); d != "" || got.Model != full.Model {
		t.Errorf("Clear must keep the metadata and model (-want +got):\n%s", d)
	}
}

func contractDelete(t *testing.T, open opener) {
	st := open(t, Config{})
	mustUpdate(t, st, "d", func(s *Session) { s.Messages = []Message{msg("user", "hi")} })
	mustUpdate(t, st, "other", func(s *Session) { s.Messages = []Message{msg("user", "stay")} })
	for range 2 {
		if _, err := TakeSnapshot(ctx, st, "d", ReasonManual); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Delete(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "d"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete: %v", err)
	}
	if infos, _ := st.ListSnapshots(ctx, "d"); len(infos) != 0 {
		t.Errorf("snapshots survive Delete: %+v", infos)
	}
	if err := st.Delete(ctx, "d"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	if list, _ := st.List(ctx); len(list) != 1 || list[0].SessionID != "other" {
		t.Errorf("List after Delete = %+v, want only other", list)
	}
	// Snapshots without a session are deleted too.
	st.SaveSnapshot(ctx, &Snapshot{SessionID: "orphan"})
	if err := st.Delete(ctx, "orphan"); err != nil {
		t.Errorf("Delete of a session with only snapshots: %v", err)
	}
}

func contractList(t *testing.T, open opener) {
	st := open(t, Config{})
	for _, id := range []string{"first", "second", "third"} {
		mustUpdate(t, st, id, func(s *Session) {
			s.Model = "m-" + id
			s.Messages = conversation(3, 10, id)
			s.Stats = Stats{Tokens: 100, Limit: 1000, Usage: 0.1, Requests: 1}
		})
	}
	mustUpdate(t, st, "first", func(s *Session) { s.Stats.Requests++ }) // most recent now
	st.SaveSnapshot(ctx, &Snapshot{SessionID: "second"})
	list, err := st.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, info := range list {
		got = append(got, fmt.Sprintf("%s %s msgs=%d tokens=%d limit=%d req=%d snaps=%d",
			info.SessionID, info.Model, info.Messages, info.Tokens, info.Limit, info.Requests, info.Snapshots))
	}
	want := []string{
		"first m-first msgs=3 tokens=100 limit=1000 req=2 snaps=0",
		"third m-third msgs=3 tokens=100 limit=1000 req=1 snaps=0",
		"second m-second msgs=3 tokens=100 limit=1000 req=1 snaps=1",
	}
	if d := diff(want, got); d != "" {
		t.Errorf("List, most recently updated first (-want +got):\n%s", d)
	}
}

func contractSnapshots(t *testing.T, open opener) {
	st := open(t, Config{})
	full := fullSession("snap")
	var saved []adminapi.SnapshotInfo
	for i := range 3 {
		snap := NewSnapshot(full, ReasonManual)
		snap.Tokens = 100 * (i + 1)
		info, err := st.SaveSnapshot(ctx, snap)
		if err != nil {
			t.Fatal(err)
		}
		if checkSnapID(info.ID) != nil || info.Created.IsZero() || info.Bytes == 0 || info.Messages != len(full.Messages) {
			t.Errorf("SaveSnapshot info %+v: want an id, a time, a size and the message count", info)
		}
		if snap.ID != "" || !snap.Created.IsZero() {
			t.Error("SaveSnapshot changed the caller's snapshot")
		}
		saved = append(saved, info)
	}
	list, err := st.ListSnapshots(ctx, "snap")
	if err != nil {
		t.Fatal(err)
	}
	if d := diff([]adminapi.SnapshotInfo{saved[2], saved[1], saved[0]}, list); d != "" {
		t.Errorf("ListSnapshots, newest first (-want +got):\n%s", d)
	}
	got, err := st.LoadSnapshot(ctx, "snap", saved[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	want := NewSnapshot(full, ReasonManual)
	want.ID, want.Created, want.Tokens = saved[1].ID, saved[1].Created, 200
	if d := diff(want, got); d != "" {
		t.Errorf("LoadSnapshot (-want +got):\n%s", d)
	}
	if err := st.DeleteSnapshot(ctx, "snap", saved[1].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.LoadSnapshot(ctx, "snap", saved[1].ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("LoadSnapshot after DeleteSnapshot: %v", err)
	}
	if err := st.DeleteSnapshot(ctx, "snap", saved[1].ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second DeleteSnapshot: %v, want ErrNotFound", err)
	}
	if list, _ := st.ListSnapshots(ctx, "snap"); len(list) != 2 {
		t.Errorf("index after DeleteSnapshot lists %d, want 2", len(list))
	}
	// A snapshot of another session by the same id is not reachable.
	if _, err := st.LoadSnapshot(ctx, "someone else", saved[0].ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("LoadSnapshot through another session: %v, want ErrNotFound", err)
	}
}

func contractSnapshotIDs(t *testing.T, open opener) {
	st := open(t, Config{})
	for _, id := range []string{"../x", "..", ".hidden", "a/b", "a b", "", strings.Repeat("x", 65), "x\x00"} {
		if _, err := st.LoadSnapshot(ctx, "s", id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("LoadSnapshot(%q): %v, want ErrInvalidID", id, err)
		}
		if err := st.DeleteSnapshot(ctx, "s", id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("DeleteSnapshot(%q): %v, want ErrInvalidID", id, err)
		}
		if id != "" {
			if _, err := st.SaveSnapshot(ctx, &Snapshot{SessionID: "s", ID: id}); !errors.Is(err, ErrInvalidID) {
				t.Errorf("SaveSnapshot with id %q: %v, want ErrInvalidID", id, err)
			}
		}
	}
	// A caller's valid id is kept.
	info, err := st.SaveSnapshot(ctx, &Snapshot{SessionID: "s", ID: "before-upgrade"})
	if err != nil || info.ID != "before-upgrade" {
		t.Errorf("SaveSnapshot with a valid id = %+v, %v", info, err)
	}
}

func contractRetention(t *testing.T, open opener) {
	st := open(t, Config{MaxCount: 3})
	var ids []string
	for i := range 5 {
		info, err := st.SaveSnapshot(ctx, &Snapshot{SessionID: "r", Created: t0.Add(time.Duration(i) * time.Minute), Tokens: i})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	list, _ := st.ListSnapshots(ctx, "r")
	var got []string
	for _, info := range list {
		got = append(got, info.ID)
	}
	if d := diff([]string{ids[4], ids[3], ids[2]}, got); d != "" {
		t.Errorf("after 5 snapshots with max_count 3 (-want +got):\n%s", d)
	}
	for _, id := range ids[:2] {
		if _, err := st.LoadSnapshot(ctx, "r", id); !errors.Is(err, ErrNotFound) {
			t.Errorf("oldest snapshot %s still loads: %v", id, err)
		}
	}
}

func contractRestart(t *testing.T, open opener) {
	st := open(t, Config{})
	want := map[string]*Session{}
	snaps := map[string][]adminapi.SnapshotInfo{}
	for i, id := range []string{"one", "two", "a/../three"} {
		mustUpdate(t, st, id, func(s *Session) {
			s.Messages = conversation(4+i, 50, id)
			s.Metadata = map[string]any{"n": float64(i)}
		})
		want[id] = mustGet(t, st, id)
		for range i + 1 {
			info, err := TakeSnapshot(ctx, st, id, ReasonAuto)
			if err != nil {
				t.Fatal(err)
			}
			snaps[id] = append([]adminapi.SnapshotInfo{info}, snaps[id]...)
		}
	}
	wantList, _ := st.List(ctx)

	st2 := open(t, Config{}) // a restarted ctxproxy
	gotList, err := st2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(wantList, gotList); d != "" {
		t.Errorf("List after restart (-before +after):\n%s", d)
	}
	for id, s := range want {
		if d := diff(s, mustGet(t, st2, id)); d != "" {
			t.Errorf("session %q after restart (-before +after):\n%s", id, d)
		}
		list, _ := st2.ListSnapshots(ctx, id)
		if d := diff(snaps[id], list); d != "" {
			t.Errorf("snapshots of %q after restart (-before +after):\n%s", id, d)
		}
		for _, info := range list {
			if _, err := st2.LoadSnapshot(ctx, id, info.ID); err != nil {
				t.Errorf("LoadSnapshot(%q, %s) after restart: %v", id, info.ID, err)
			}
		}
	}
}

func contractRestore(t *testing.T, open opener) {
	st := open(t, Config{})
	mustUpdate(t, st, "r", func(s *Session) {
		s.Messages = conversation(4, 20, "early")
		s.Metadata = map[string]any{"phase": "early"}
		s.Stats = Stats{Tokens: 40, Usage: 0.1, Requests: 2}
	})
	early, err := TakeSnapshot(ctx, st, "r", ReasonManual)
	if err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, st, "r", func(s *Session) {
		s.Messages = conversation(8, 20, "late")
		s.Metadata = map[string]any{"phase": "late"}
		s.Stats = Stats{Tokens: 80, Usage: 0.2, Requests: 5}
	})
	late := mustGet(t, st, "r")

	undo, err := Restore(ctx, st, "r", early.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, st, "r")
	if d := diff(conversation(4, 20, "early"), got.Messages); d != "" {
		t.Errorf("messages after Restore (-want +got):\n%s", d)
	}
	if got.Metadata["phase"] != "early" || got.Stats.Tokens != 40 || got.Stats.Requests != 5 {
		t.Errorf("after Restore: metadata %v, tokens %d, requests %d; want early, 40, 5", got.Metadata, got.Stats.Tokens, got.Stats.Requests)
	}
	if undo.Reason != ReasonRestore || undo.Messages != 8 {
		t.Fatalf("undo snapshot %+v: want the replaced 8 messages", undo)
	}
	if _, err := Restore(ctx, st, "r", undo.ID); err != nil {
		t.Fatal(err)
	}
	if d := diff(late.Messages, mustGet(t, st, "r").Messages); d != "" {
		t.Errorf("restoring the undo snapshot (-want +got):\n%s", d)
	}
	if _, err := Restore(ctx, st, "r", "20990101-000000-000000"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Restore of a missing snapshot: %v", err)
	}
}

func contractImport(t *testing.T, open opener) {
	st := open(t, Config{})
	orig := fullSession("exp")
	mustUpdate(t, st, "exp", func(s *Session) { *s = *orig.Clone() })
	data, err := EncodeExport(mustGet(t, st, "exp"))
	if err != nil {
		t.Fatal(err)
	}
	n, undo, err := Import(ctx, st, "imp", data)
	if err != nil || n != len(orig.Messages) || undo.ID != "" {
		t.Fatalf("Import = %d, %+v, %v", n, undo, err)
	}
	want := orig.Clone().Messages
	withDefaultImportance(want)
	if d := diff(want, mustGet(t, st, "imp").Messages); d != "" {
		t.Errorf("exported then imported messages (-want +got):\n%s", d)
	}
	// Importing over a conversation keeps the old one as a snapshot.
	n, undo, err = Import(ctx, st, "exp", []byte(`[{"role":"user","content":"fresh"}]`))
	if err != nil || n != 1 || undo.Reason != ReasonImport || undo.Messages != len(orig.Messages) {
		t.Errorf("Import over a conversation = %d, %+v, %v", n, undo, err)
	}
	// A malformed import changes nothing.
	before := mustGet(t, st, "exp")
	if _, _, err := Import(ctx, st, "exp", []byte(`{"messages":[{"role":"user","content":"x"},{"content":"no role"}]}`)); !errors.Is(err, ErrMalformed) {
		t.Errorf("malformed Import: %v, want ErrMalformed", err)
	}
	if d := diff(before, mustGet(t, st, "exp")); d != "" {
		t.Errorf("a malformed import changed the session:\n%s", d)
	}
}

func contractCounters(t *testing.T, open opener) {
	st := open(t, Config{})
	mustUpdate(t, st, "c", func(s *Session) { s.Messages = conversation(10, 100, "c") })
	st.SaveSnapshot(ctx, &Snapshot{SessionID: "c"})
	mustGet(t, st, "c")
	c := st.Counters()
	if c.Writes != 2 || c.WriteBytes == 0 || c.Reads < 1 || c.WriteErrors != 0 || c.Corrupt != 0 {
		t.Errorf("Counters = %+v", c)
	}
}
