package plan

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// TestPruneStoredKeepsToolUnits: the prune of a stored history keeps a
// tool call with its result or drops both, keeps the important and the
// newest messages, and maps what it keeps back to the stored messages, so
// they keep their timestamps.
func TestPruneStoredKeepsToolUnits(t *testing.T) {
	imp := func(f float64) *float64 { return &f }
	text := strings.Repeat("word ", 40)
	stored := []snapshots.Message{{Role: "system", Content: "S", Raw: json.RawMessage(`{"role":"system","content":"S"}`)}}
	add := func(raw string, importance *float64) {
		m, _, err := wire.DecodeMessage([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		sm := sessions.ToStored([]rewrite.Message{m})[0]
		sm.Importance = importance
		stored = append(stored, sm)
	}
	for i := range 10 {
		role := []string{"user", "assistant"}[i%2]
		add(fmt.Sprintf(`{"role":%q,"content":"filler %d %s"}`, role, i, text), imp(0.3))
	}
	add(`{"role":"user","content":"look it up"}`, nil)
	add(`{"role":"assistant","content":"","tool_calls":[{"function":{"name":"find","arguments":{"q":"kept"}}}]}`, imp(0.9))
	add(`{"role":"tool","content":"kept result `+text+`"}`, nil)
	add(`{"role":"assistant","content":"","tool_calls":[{"function":{"name":"find","arguments":{"q":"dropped"}}}]}`, imp(0.2))
	add(`{"role":"tool","content":"dropped result `+text+`"}`, imp(0.2))
	for i := range 4 {
		role := []string{"user", "assistant"}[i%2]
		add(fmt.Sprintf(`{"role":%q,"content":"recent %d"}`, role, i), nil)
	}
	add(`{"role":"user","content":"the newest"}`, nil)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range stored {
		stored[i].Timestamp = at
	}
	msgs, err := sessions.FromStored(stored)
	if err != nil {
		t.Fatal(err)
	}
	trimmer, err := rewrite.NewTrimmer(rewrite.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	counter := budget.NewMessageCounter(tokenizer.Approx{}, 0)
	p := Plan{Accumulated: true, Sent: msgs, Counter: counter, Limit: 400}
	reply := snapshots.Message{Role: "assistant", Content: "done", Raw: json.RawMessage(`{"role":"assistant","content":"done"}`)}
	pr := pruneStored(trimmer, p, &reply)
	if pr == nil {
		t.Fatalf("a history of %d tokens past a window of 400 was not pruned", rewrite.Total(msgs, counter))
	}
	sess := &snapshots.Session{Messages: append(slices.Clone(stored), reply)}
	if !pr.apply(sess, at.Add(time.Hour)) {
		t.Fatal("the prune did not apply to the history it was decided on")
	}
	var kept []string
	for _, m := range sess.Messages {
		kept = append(kept, m.Role+":"+strings.TrimSuffix(m.Content, " "+text))
		if m.Content != "" && !strings.HasPrefix(m.Content, "[") && !m.Timestamp.Equal(at) && m.Content != "done" {
			t.Errorf("%s lost its timestamp: %v", m.Content, m.Timestamp)
		}
	}
	joined := strings.Join(kept, " | ")
	for _, want := range []string{"system:S", "tool:kept result", "user:recent 0", "assistant:recent 3", "user:the newest", "assistant:done"} {
		if !strings.Contains(joined, want) {
			t.Errorf("%q was pruned: %s", want, joined)
		}
	}
	if strings.Contains(joined, "dropped result") || strings.Contains(joined, "filler 0") {
		t.Errorf("low-importance messages stayed: %s", joined)
	}
	calls := 0
	for _, m := range sess.Messages {
		if strings.Contains(string(m.Raw), `"kept"`) {
			calls++
			// The call has no content: checked here, as the loop above
			// skips it.
			if m.Role == "assistant" && !m.Timestamp.Equal(at) {
				t.Errorf("the kept tool call lost its timestamp: %v", m.Timestamp)
			}
		}
		if strings.Contains(string(m.Raw), `"dropped"`) {
			t.Errorf("the dropped call stayed without its result: %s", m.Raw)
		}
	}
	if calls != 1 {
		t.Errorf("the kept result's call: %d", calls)
	}
	if sess.Stats.Usage > trimmer.Target()+0.05 {
		t.Errorf("pruned to %.2f of the window", sess.Stats.Usage)
	}
}
