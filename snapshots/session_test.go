package snapshots

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

func TestAccumulate(t *testing.T) {
	sys := msg("system", "be brief")
	sys2 := msg("system", "be verbose")
	u1, a1, u2 := msg("user", "q1"), msg("assistant", "a1"), msg("user", "q2")
	tests := []struct {
		name   string
		stored []Message
		sent   []Message
		want   []Message
	}{
		{"no session", nil, []Message{u1}, []Message{u1}},
		{"history then new turn", []Message{u1, a1}, []Message{u2}, []Message{u1, a1, u2}},
		{"stored system kept", []Message{sys, u1, a1}, []Message{u2}, []Message{sys, u1, a1, u2}},
		{"resent system not doubled", []Message{sys, u1, a1}, []Message{sys, u2}, []Message{sys, u1, a1, u2}},
		{"new system replaces old", []Message{sys, u1, a1}, []Message{sys2, u2}, []Message{sys2, u1, a1, u2}},
		{"system added later", []Message{u1, a1}, []Message{sys, u2}, []Message{sys, u1, a1, u2}},
		{"nothing sent", []Message{u1, a1}, nil, []Message{u1, a1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s *Session
			if tt.stored != nil {
				s = &Session{Messages: tt.stored}
			}
			got := Accumulate(s, tt.sent)
			if d := diff(tt.want, got); d != "" {
				t.Errorf("Accumulate (-want +got):\n%s", d)
			}
			if s != nil && len(s.Messages) != len(tt.stored) {
				t.Error("Accumulate changed the session")
			}
		})
	}
}

// A client that resends its whole history keeps the stored timestamps,
// importance and metadata of the messages that did not change.
func TestSetMessages(t *testing.T) {
	later := t0.Add(time.Hour)
	old := []Message{msg("user", "q1"), msg("assistant", "a1")}
	old[0].Timestamp, old[1].Timestamp = t0, t0
	old[0].Importance = ptr(0.9)
	old[1].Metadata = map[string]any{"k": "v"}
	s := &Session{Messages: old}

	edited := msg("assistant", "a1 edited")
	s.SetMessages([]Message{msg("user", "q1"), edited, msg("user", "q2")}, later)
	want := []Message{old[0], edited, msg("user", "q2")}
	want[1].Timestamp, want[2].Timestamp = later, later
	if d := diff(want, s.Messages); d != "" {
		t.Errorf("SetMessages (-want +got):\n%s", d)
	}

	// It stamps the given messages in place, and the writer may run an
	// update again after a failed write: a second run on the same
	// messages, from the same stored state, gives the same session.
	in := []Message{msg("user", "q1"), edited, msg("user", "q2")}
	first := &Session{Messages: slices.Clone(old)}
	first.SetMessages(in, later)
	again := &Session{Messages: slices.Clone(old)}
	again.SetMessages(in, later)
	if d := diff(want, again.Messages); d != "" {
		t.Errorf("SetMessages run again (-want +got):\n%s", d)
	}
	// In place: a turn's list is not copied again.
	if n := testing.AllocsPerRun(50, func() { again.SetMessages(in, later) }); n > 0 {
		t.Errorf("SetMessages allocated %v times, want none", n)
	}
}

func TestConfig(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	d := Config{}.withDefaults()
	if d.Store != StoreFile || d.Dir != "./ctxproxy-data" || d.AutoThreshold != 0.80 || d.MaxCount != 20 || d.Redis.Prefix != "ctxproxy:" {
		t.Errorf("defaults %+v", d)
	}
	err := Config{Store: "s3", AutoThreshold: 1.5, MaxCount: -1, QueueSize: -1, Workers: -2, Redis: RedisConfig{DB: -1}}.Validate()
	for _, key := range []string{"snapshots.store", "auto_threshold", "max_count", "queue_size", "workers", "redis.db"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("Validate does not report %s: %v", key, err)
		}
	}
}

// TestSetMessagesSharesStoredRaw: a resent message with the same raw bytes
// takes the stored copy, so that encoding the change finds it equal by
// address; a changed one keeps its own.
func TestSetMessagesSharesStoredRaw(t *testing.T) {
	stored := []Message{{Role: "user", Content: "q1", Raw: []byte(`{"role":"user","content":"q1"}`)},
		{Role: "assistant", Content: "a1", Raw: []byte(`{"role":"assistant","content":"a1"}`)}}
	s := &Session{Messages: stored}
	sent := []Message{{Role: "user", Content: "q1", Raw: []byte(`{"role":"user","content":"q1"}`)},
		{Role: "assistant", Content: "a2", Raw: []byte(`{"role":"assistant","content":"a2"}`)}}
	own := &sent[1].Raw[0]
	s.SetMessages(sent, time.Now())
	if &s.Messages[0].Raw[0] != &stored[0].Raw[0] {
		t.Error("the unchanged message kept its own copy of the same raw bytes")
	}
	if &s.Messages[1].Raw[0] != own || string(s.Messages[1].Raw) != `{"role":"assistant","content":"a2"}` {
		t.Errorf("the changed message's raw bytes = %s, not its own", s.Messages[1].Raw)
	}
}

// TestOldBudgetRecordReads: session records written before the budget's
// template tokens were stored, and those written with them omitted when
// 0, read with Template 0; the others keep every part. Encoded again, the
// budget keeps its names.
func TestOldBudgetRecordReads(t *testing.T) {
	for _, c := range []struct {
		record string
		want   adminapi.Budget
	}{
		{`{"session_id":"s","created":"2025-01-02T03:04:05Z","updated":"2025-01-02T03:04:05Z","stats":{"tokens":7000,"usage":0.85,"requests":3,` +
			`"budget":{"total":8192,"system":10,"tools":20,"reserve":512,"conversation":7000}}}`,
			adminapi.Budget{Total: 8192, SystemPrompt: 10, Tools: 20, ResponseReserve: 512, Conversation: 7000}},
		{`{"session_id":"s","created":"2025-01-02T03:04:05Z","updated":"2025-01-02T03:04:05Z","stats":{"tokens":7000,"usage":0.85,"requests":3,` +
			`"budget":{"total":8192,"system":10,"tools":0,"template":3,"reserve":512,"conversation":7000}}}`,
			adminapi.Budget{Total: 8192, SystemPrompt: 10, Template: 3, ResponseReserve: 512, Conversation: 7000}},
	} {
		s, err := decodeSession([]byte(c.record))
		if err != nil {
			t.Fatal(err)
		}
		if s.Stats.Budget == nil || *s.Stats.Budget != c.want {
			t.Errorf("%s: budget %+v, want %+v", c.record, s.Stats.Budget, c.want)
		}
		b, err := encodeSession(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{`"total":`, `"system":`, `"tools":`, `"template":`, `"reserve":`, `"conversation":`} {
			if !strings.Contains(string(b), name) {
				t.Errorf("encoded again, %s lacks %s", b, name)
			}
		}
	}
}

// TestOldSnapshotEntryReads: a snapshot record whose index entry leaves
// out an empty model and a zero usage, as entries were once written,
// reads as the entry the admin API lists.
func TestOldSnapshotEntryReads(t *testing.T) {
	entry := json.RawMessage(`{"id":"snap1","session_id":"s","created":"2025-01-02T03:04:05Z","tokens":0,"reason":"manual","messages":0,"bytes":0}`)
	data, err := seal(formatSnapshot, entry, []byte(`{"id":"snap1","session_id":"s","created":"2025-01-02T03:04:05Z","tokens":0,"reason":"manual"}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := readInfo[adminapi.SnapshotInfo](data, formatSnapshot)
	want := adminapi.SnapshotInfo{ID: "snap1", SessionID: "s", Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Reason: "manual"}
	if err != nil || got != want {
		t.Errorf("readInfo = %+v, %v; want %+v", got, err, want)
	}
}
