package repl

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/testkit/proxytest"
)

// trimAtLimit is a proxy that warns at 80% and 90% and trims only when
// the conversation no longer fits (the smart strategy acting at 100%).
var trimAtLimit = proxytest.Options{Strategy: rewrite.Config{Mode: "smart", Threshold: 1, Target: 0.6}}

// TestChatSendsOnlyTheNewTurn: each turn sends only the new message;
// ctxproxy keeps user and assistant turns in order for the next one.
func TestChatSendsOnlyTheNewTurn(t *testing.T) {
	p := start(t, proxytest.Options{})
	rec := record(t, p.URL)
	runChat(t, p, chatRun{url: rec.url, session: "s1", model: "llama3.1", system: "Be brief."},
		lines("first question", "second question"))
	chats := rec.chats()
	if len(chats) != 2 {
		t.Fatalf("%d chat requests, want 2", len(chats))
	}
	if diff := cmp.Diff([]string{"system: Be brief.", "user: first question"}, roles(chats[0].body)); diff != "" {
		t.Errorf("first turn (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"user: second question"}, roles(chats[1].body)); diff != "" {
		t.Errorf("second turn sends only the new message (-want +got):\n%s", diff)
	}
	for _, c := range chats {
		if c.header.Get("X-Session-ID") != "s1" || c.header.Get("X-Ctxproxy-Accumulate") != "1" {
			t.Errorf("chat request headers %v: want X-Session-ID s1 and X-Ctxproxy-Accumulate 1", c.header)
		}
	}
	want := []string{"system: Be brief.", "user: first question", "assistant: echo: first question",
		"user: second question", "assistant: echo: second question"}
	var stored []string
	for _, m := range p.Session(t, "s1").Messages {
		stored = append(stored, m.Role+": "+m.Content)
	}
	if diff := cmp.Diff(want, stored); diff != "" {
		t.Errorf("stored turns (-want +got):\n%s", diff)
	}
	last, _ := p.Backend.Last("/api/chat")
	if diff := cmp.Diff(want[:4], roles(last.Body)); diff != "" {
		t.Errorf("the backend's second turn, all of it in order (-want +got):\n%s", diff)
	}
}

// TestChatClearStartsFresh: /clear removes every turn, the next prompt
// starts fresh, and the session's metadata stays.
func TestChatClearStartsFresh(t *testing.T) {
	p := start(t, proxytest.Options{})
	converse(t, p, "s1", 5, 40)
	if _, _, err := newClient(t, p, "").PutSession(context.Background(), "s1", map[string]any{"agent": "augment"}, ""); err != nil {
		t.Fatal(err)
	}
	rec := record(t, p.URL)
	out := runChat(t, p, chatRun{url: rec.url, session: "s1", model: "llama3.1", system: "Be brief."}, lines("/clear", "fresh start"))
	if !strings.Contains(out.stdout, "Context cleared.\n") {
		t.Errorf("stdout %q: want \"Context cleared.\"", out.stdout)
	}
	chats := rec.chats()
	if len(chats) != 1 || !cmp.Equal(roles(chats[0].body), []string{"system: Be brief.", "user: fresh start"}) {
		t.Fatalf("after /clear the turn sent %v: want the system prompt again and the user message", chats)
	}
	s := p.Session(t, "s1")
	if len(s.Messages) != 3 {
		t.Errorf("%d messages stored after /clear and one turn, want 3 (no history)", len(s.Messages))
	}
	last, _ := p.Backend.Last("/api/chat")
	if got := roles(last.Body); len(got) != 2 {
		t.Errorf("the backend got %v after /clear, want no history", got)
	}
	if s.Metadata["agent"] != "augment" {
		t.Errorf("metadata after /clear = %v, want it kept", s.Metadata)
	}
}

// tokensLine finds "Tokens  N / M" in /stats output.
var tokensLine = regexp.MustCompile(`(?m)^Tokens +([0-9,]+)(?: as sent)? / ([0-9,]+)`)

// TestChatStatsShowsRunningTotal: /stats shows the running token total
// as turns are added.
func TestChatStatsShowsRunningTotal(t *testing.T) {
	p := start(t, proxytest.Options{})
	out := runChat(t, p, chatRun{session: "s1", model: "llama3.1", noBar: true},
		lines("/stats", "a question of some length", "/stats", "another question", "/stats"))
	// The session does not exist before the first turn.
	if !strings.Contains(out.stdout, "Session s1 is empty: nothing was sent in it yet.\n") {
		t.Errorf("stdout %q: want the first /stats to say the session is empty", out.stdout)
	}
	var totals []string
	for _, m := range tokensLine.FindAllStringSubmatch(out.stdout, -1) {
		totals = append(totals, m[1]+" / "+m[2])
	}
	// The prompt as sent, counted 4 characters a token with each
	// message's framing: the first question (7 + framing); then the
	// question, its echo and the second question.
	if diff := cmp.Diff([]string{"14 / 1,000", "34 / 1,000"}, totals); diff != "" {
		t.Errorf("running totals (-want +got):\n%s\n%s", diff, out.stdout)
	}
}

// warningOrder checks that want comes after the reply and before the next
// command's output, in the order the user sees them.
func warningOrder(t *testing.T, both, reply, want, next string) {
	t.Helper()
	r, w, n := strings.Index(both, reply), strings.Index(both, want), strings.Index(both, next)
	if r < 0 || w < 0 || n < 0 || !(r < w && w < n) {
		t.Errorf("want reply %q, then %q, then %q; got:\n%s", reply, want, next, both)
	}
}

// TestChatWarnsAt80Percent: the yellow warning after the reply; the chat goes on (the next command is answered).
func TestChatWarnsAt80Percent(t *testing.T) {
	p := start(t, trimAtLimit)
	p.Seed(t, "s1", "llama3.1", turns(2, 1640)...) // about 820 tokens of 1,000
	out := runChat(t, p, chatRun{session: "s1", model: "llama3.1", color: true}, lines("next", "/save"))
	want := "\x1b[33m⚠ Context at 80% capacity. Consider /clear or /save.\x1b[0m\n"
	warningOrder(t, out.both, "echo: next\n", want, "Saved snapshot")
	if strings.Contains(out.both, "90%") || strings.Contains(out.both, "ℹ") {
		t.Errorf("at 82%% only the 80%% warning:\n%s", out.both)
	}
}

// TestChatWarnsAt90Percent: the orange warning.
func TestChatWarnsAt90Percent(t *testing.T) {
	p := start(t, trimAtLimit)
	p.Seed(t, "s1", "llama3.1", turns(2, 1840)...) // about 920 tokens of 1,000
	out := runChat(t, p, chatRun{session: "s1", model: "llama3.1", color: true}, lines("next", "/save"))
	want := "\x1b[38;5;208m⚠ Context at 90% capacity. Auto-trimming soon.\x1b[0m\n"
	warningOrder(t, out.both, "echo: next\n", want, "Saved snapshot")
}

// TestChatNoticeAfterTrim: after ctxproxy trimmed, the info
// notice shows before the next prompt and the chat goes on.
func TestChatNoticeAfterTrim(t *testing.T) {
	p := start(t, trimAtLimit)
	p.Seed(t, "s1", "llama3.1", turns(20, 220)...) // 20 × 55 tokens: over the limit of 1,000
	out := runChat(t, p, chatRun{session: "s1", model: "llama3.1"}, lines("one more", "and another"))
	warningOrder(t, out.both, "echo: one more\n", "ℹ Context trimmed. Kept first 2 and last 12 messages.\n", "echo: and another\n")
	if strings.Contains(out.both, "\x1b[") {
		t.Errorf("colors on a pipe:\n%q", out.both)
	}
	last, _ := p.Backend.Last("/api/chat")
	if n := len(roles(last.Body)); n >= 22 {
		t.Errorf("the backend got %d messages: nothing was trimmed", n)
	}
}

// TestChatExportWritesJSON: /export writes the turns with the
// session id, timestamps and metadata.
func TestChatExportWritesJSON(t *testing.T) {
	p := start(t, proxytest.Options{})
	file := filepath.Join(t.TempDir(), "context.json")
	out := runChat(t, p, chatRun{session: "s1", model: "llama3.1"}, lines("remember this", "/export "+file))
	if !strings.Contains(out.stdout, "Exported 2 messages to "+file+".\n") {
		t.Errorf("stdout %q: want the export confirmed", out.stdout)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var export struct {
		SessionID string         `json:"session_id"`
		Metadata  map[string]any `json:"metadata"`
		Messages  []struct {
			Role      string    `json:"role"`
			Content   string    `json:"content"`
			Timestamp time.Time `json:"timestamp"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(data, &export); err != nil {
		t.Fatalf("export is not JSON: %v\n%s", err, data)
	}
	if export.SessionID != "s1" || export.Metadata == nil || len(export.Messages) != 2 ||
		export.Messages[0].Role != "user" || export.Messages[1].Content != "echo: remember this" ||
		export.Messages[0].Timestamp.IsZero() {
		t.Errorf("export = %+v\n%s", export, data)
	}
}

// TestChatImportLoadsTurns: /import loads the turns into the
// session and the next turn carries them.
func TestChatImportLoadsTurns(t *testing.T) {
	p := start(t, proxytest.Options{})
	file := filepath.Join(t.TempDir(), "context.json")
	export := `{"session_id":"old","messages":[{"role":"user","content":"We use Go."},` +
		`{"role":"assistant","content":"Noted."}],"metadata":{}}`
	if err := os.WriteFile(file, []byte(export), 0o600); err != nil {
		t.Fatal(err)
	}
	out := runChat(t, p, chatRun{session: "s2", model: "llama3.1"}, lines("/import "+file, "What do we use?"))
	if !strings.Contains(out.stdout, "Imported 2 messages into session s2.\n") {
		t.Errorf("stdout %q: want the import confirmed", out.stdout)
	}
	last, _ := p.Backend.Last("/api/chat")
	if diff := cmp.Diff([]string{"user: We use Go.", "assistant: Noted.", "user: What do we use?"}, roles(last.Body)); diff != "" {
		t.Errorf("the next turn did not carry the imported context (-want +got):\n%s", diff)
	}
	if got := len(p.Session(t, "s2").Messages); got != 4 {
		t.Errorf("%d messages stored, want 4", got)
	}
}
