package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ctxproxy/ctxproxy/internal/fakebackend"
	"github.com/ctxproxy/ctxproxy/view"
)

// chatOut is what a chat printed.
type chatOut struct {
	stdout, stderr string
	// both is stdout and stderr as one stream, in the order written.
	both string
}

// runChat runs "ctxproxy chat" against f with script as its piped stdin.
func runChat(t *testing.T, f *fakeProxy, env map[string]string, script string, args ...string) chatOut {
	t.Helper()
	var out, errw, both syncBuffer
	if env == nil {
		env = map[string]string{}
	}
	env["TZ"] = "UTC"
	argv := append([]string{"chat", "--proxy", f.URL, "--history", ""}, args...)
	err := run(context.Background(), argv, envOf(env), strings.NewReader(script),
		io.MultiWriter(&out, &both), io.MultiWriter(&errw, &both))
	if err != nil {
		t.Fatalf("chat: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errw.String())
	}
	return chatOut{stdout: out.String(), stderr: errw.String(), both: both.String()}
}

// lines is script with a newline after each line.
func lines(l ...string) string { return strings.Join(l, "\n") + "\n" }

// normalize replaces the parts of an output that change from run to run.
func normalize(s string, pairs ...string) string {
	return strings.NewReplacer(pairs...).Replace(s)
}

// TestChatScriptedSession drives every chat command through piped stdin
// and compares the output with golden files.
func TestChatScriptedSession(t *testing.T) {
	f := newFakeProxy(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "context.json")
	out := runChat(t, f, nil, lines(
		"Hello there",
		"/stats",
		"/save",
		"/context",
		"/context list",
		"/context snapshot",
		"/context restore snap-1",
		"/context size 4096",
		"/context auto",
		"Tell me more",
		"/context compress",
		"/context stats",
		"/export "+file,
		"/clear",
		"/import "+file,
		"/context clear",
		"/model",
		"/model llama3.2",
		"/help",
		"/nonsense",
		"/context nonsense",
		"/export",
		"//slash at the start",
		"/quit",
		"this line is never sent",
	), "--session", "s1", "--model", "llama3.1")
	repl := []string{dir, "$DIR", f.URL, "$PROXY"}
	golden(t, "chat/scripted.stdout", normalize(out.stdout, repl...))
	golden(t, "chat/scripted.stderr", normalize(out.stderr, repl...))

	var sent []string
	for _, c := range f.chatLog() {
		for _, m := range c.messages {
			sent = append(sent, m.Role+": "+m.Content)
		}
		if c.header.Get("X-Session-ID") != "s1" || c.header.Get("X-Ctxproxy-Accumulate") != "1" {
			t.Errorf("chat request headers %v: want X-Session-ID s1 and X-Ctxproxy-Accumulate 1", c.header)
		}
	}
	want := []string{"user: Hello there", "user: Tell me more", "user: /slash at the start"}
	if diff := cmp.Diff(want, sent); diff != "" {
		t.Errorf("turns sent (-want +got):\n%s", diff)
	}
}

// TestSeed000_AddTurnToContext: each turn sends only the new message;
// ctxproxy keeps user and assistant turns in order for the next one.
func TestSeed000_AddTurnToContext(t *testing.T) {
	f := newFakeProxy(t)
	runChat(t, f, nil, lines("first question", "second question"),
		"--session", "s1", "--model", "llama3.1", "--system", "Be brief.")
	chats := f.chatLog()
	if len(chats) != 2 {
		t.Fatalf("%d chat requests, want 2", len(chats))
	}
	roles := func(msgs []fakeMessage) (out []string) {
		for _, m := range msgs {
			out = append(out, m.Role+": "+m.Content)
		}
		return out
	}
	if diff := cmp.Diff([]string{"system: Be brief.", "user: first question"}, roles(chats[0].messages)); diff != "" {
		t.Errorf("first turn (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"user: second question"}, roles(chats[1].messages)); diff != "" {
		t.Errorf("second turn sends only the new message (-want +got):\n%s", diff)
	}
	want := []string{"system: Be brief.", "user: first question", "assistant: echo: first question",
		"user: second question", "assistant: echo: second question"}
	if diff := cmp.Diff(want, roles(f.stored("s1"))); diff != "" {
		t.Errorf("stored turns (-want +got):\n%s", diff)
	}
	last, _ := f.backend.Last("/api/chat")
	var body struct {
		Messages []fakeMessage `json:"messages"`
	}
	_ = json.Unmarshal(last.Body, &body)
	if len(body.Messages) != 4 {
		t.Errorf("the backend got %d messages on the second turn, want all 4 in order", len(body.Messages))
	}
}

// TestSeed000_ClearContext: /clear removes every turn, the next prompt
// starts fresh, and the session's metadata stays.
func TestSeed000_ClearContext(t *testing.T) {
	f := newFakeProxy(t)
	f.seed("s1", 6, 40)
	f.mu.Lock()
	f.sessions["s1"].metadata["agent"] = "augment"
	f.mu.Unlock()
	out := runChat(t, f, nil, lines("/clear", "fresh start"),
		"--session", "s1", "--model", "llama3.1", "--system", "Be brief.")
	if !strings.Contains(out.stdout, "Context cleared.\n") {
		t.Errorf("stdout %q: want seed 000's \"Context cleared.\"", out.stdout)
	}
	chats := f.chatLog()
	if len(chats) != 1 || len(chats[0].messages) != 2 || chats[0].messages[0].Role != "system" {
		t.Fatalf("after /clear the turn sent %+v: want the system prompt again and the user message", chats)
	}
	if got := len(f.stored("s1")); got != 3 {
		t.Errorf("%d messages stored after /clear and one turn, want 3 (no history)", got)
	}
	f.mu.Lock()
	meta := f.sessions["s1"].metadata["agent"]
	f.mu.Unlock()
	if meta != "augment" {
		t.Errorf("metadata after /clear = %v, want it kept", meta)
	}
}

// tokensLine finds "Tokens  N / M" in /stats output.
var tokensLine = regexp.MustCompile(`(?m)^Tokens +([0-9,]+)(?: as sent)? / ([0-9,]+)`)

// TestSeed000_TrackRunningTokenTotal: /stats shows the running token total
// as turns are added.
func TestSeed000_TrackRunningTokenTotal(t *testing.T) {
	f := newFakeProxy(t)
	out := runChat(t, f, nil, lines("/stats", "a question of some length", "/stats", "another question", "/stats"),
		"--session", "s1", "--model", "llama3.1", "--status=false")
	var totals []string
	for _, m := range tokensLine.FindAllStringSubmatch(out.stdout, -1) {
		totals = append(totals, m[1])
	}
	// The session does not exist before the first turn.
	if !strings.Contains(out.stdout, "Session s1 is empty: nothing was sent in it yet.\n") {
		t.Errorf("stdout %q: want the first /stats to say the session is empty", out.stdout)
	}
	// "a question of some length" 7 + "echo: ..." 8; then 4 + 6 more.
	if diff := cmp.Diff([]string{"15", "25"}, totals); diff != "" {
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

// TestSeed000_WarnAt80PercentCapacity: the yellow warning with seed 000's
// text after the reply; the chat goes on (the next command is answered).
func TestSeed000_WarnAt80PercentCapacity(t *testing.T) {
	f := newFakeProxy(t)
	f.seed("s1", 2, 1640) // 820 tokens of 1000
	out := runChat(t, f, nil, lines("next", "/save"), "--session", "s1", "--model", "llama3.1", "--color", "always")
	want := "\x1b[33m⚠ Context at 80% capacity. Consider /clear or /save.\x1b[0m\n"
	warningOrder(t, out.both, "echo: next\n", want, "Saved snapshot")
}

// TestSeed000_WarnAt90PercentCapacity: the orange warning.
func TestSeed000_WarnAt90PercentCapacity(t *testing.T) {
	f := newFakeProxy(t)
	f.seed("s1", 2, 1840) // 920 tokens of 1000
	out := runChat(t, f, nil, lines("next", "/save"), "--session", "s1", "--model", "llama3.1", "--color", "always")
	want := "\x1b[38;5;208m⚠ Context at 90% capacity. Auto-trimming soon.\x1b[0m\n"
	warningOrder(t, out.both, "echo: next\n", want, "Saved snapshot")
}

// TestSeed000_NotifyAfterAutoTrim: after ctxproxy trimmed, the info
// notice shows before the next prompt and the chat goes on.
func TestSeed000_NotifyAfterAutoTrim(t *testing.T) {
	f := newFakeProxy(t)
	f.seed("s1", 20, 220) // 20 × 55 tokens: over the limit of 1000
	out := runChat(t, f, nil, lines("one more", "and another"), "--session", "s1", "--model", "llama3.1")
	warningOrder(t, out.both, "echo: one more\n", "ℹ Context trimmed. Kept first 2 and last 10 turns.\n", "echo: and another\n")
	if strings.Contains(out.both, "\x1b[") {
		t.Errorf("colors on a pipe:\n%q", out.both)
	}
}

// TestSeed000_ExportContextToJSON: /export writes the turns with the
// session id, timestamps and metadata.
func TestSeed000_ExportContextToJSON(t *testing.T) {
	f := newFakeProxy(t)
	file := filepath.Join(t.TempDir(), "context.json")
	out := runChat(t, f, nil, lines("remember this", "/export "+file), "--session", "s1", "--model", "llama3.1")
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
		t.Errorf("export = %+v", export)
	}
}

// TestSeed000_ImportContextFromJSON: /import loads the turns into the
// session and the next turn carries them.
func TestSeed000_ImportContextFromJSON(t *testing.T) {
	f := newFakeProxy(t)
	file := filepath.Join(t.TempDir(), "context.json")
	export := `{"session_id":"old","messages":[{"role":"user","content":"We use Go."},` +
		`{"role":"assistant","content":"Noted."}],"metadata":{}}`
	if err := os.WriteFile(file, []byte(export), 0o600); err != nil {
		t.Fatal(err)
	}
	out := runChat(t, f, nil, lines("/import "+file, "What do we use?"), "--session", "s2", "--model", "llama3.1")
	if !strings.Contains(out.stdout, "Imported 2 messages into session s2.\n") {
		t.Errorf("stdout %q: want the import confirmed", out.stdout)
	}
	last, _ := f.backend.Last("/api/chat")
	if !strings.Contains(string(last.Body), "We use Go.") {
		t.Errorf("the next turn did not carry the imported context: %s", last.Body)
	}
	if got := len(f.stored("s2")); got != 4 {
		t.Errorf("%d messages stored, want 4", got)
	}
}

// TestSeed004_R7_ContextCommands: each /context subcommand does what
// Requirement 7 says, checked on the fake proxy's state.
func TestSeed004_R7_ContextCommands(t *testing.T) {
	tests := []struct {
		name  string
		line  string
		want  string
		check func(t *testing.T, f *fakeProxy)
	}{
		{"R7.1 status", "/context", "VRAM           5.1 / 24.0 GiB (21.2%)", nil},
		{"R7.2 size", "/context size 4096", "Context size: 4,096 tokens (auto sizing off).", func(t *testing.T, f *fakeProxy) {
			if f.sizeAuto || f.sizeTarget != 4096 {
				t.Errorf("size: auto %v target %d", f.sizeAuto, f.sizeTarget)
			}
		}},
		{"R7.3 auto", "/context auto", "Context size: auto, from free VRAM (8,192 tokens now).", func(t *testing.T, f *fakeProxy) {
			if !f.sizeAuto {
				t.Error("auto sizing is off")
			}
		}},
		{"R7.4 snapshot", "/context snapshot", "Saved snapshot snap-2 (6 messages, 60 tokens).", func(t *testing.T, f *fakeProxy) {
			if s := f.sessions["s1"].snapshots; len(s) != 2 || s[1].info.Reason != "manual" || s[1].info.Messages != 6 {
				t.Errorf("snapshots %+v: want a second, manual one of 6 messages", s)
			}
		}},
		{"R7.5 restore", "/context restore snap-1", "Restored snapshot snap-1: 2 messages.", func(t *testing.T, f *fakeProxy) {
			if n := len(f.sessions["s1"].messages); n != 2 {
				t.Errorf("%d messages after restore, want 2", n)
			}
		}},
		{"R7.6 list", "/context list", "snap-1  2026-03-01 10:00:04  manual  2         20      2%     ", nil},
		{"R7.7 clear", "/context clear", "Context cleared.", func(t *testing.T, f *fakeProxy) {
			if n := len(f.sessions["s1"].messages); n != 0 {
				t.Errorf("%d messages after clear", n)
			}
		}},
		{"R7.8 compress", "/context compress", "Compressed: 60 → 40 tokens (2 messages dropped, 0 summarized).", func(t *testing.T, f *fakeProxy) {
			if n := len(f.sessions["s1"].messages); n != 4 {
				t.Errorf("%d messages after compress, want 4", n)
			}
		}},
		{"R7.9 stats", "/context stats", "Model memory  6.0 GiB (5.0 GiB in VRAM)", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeProxy(t)
			f.seed("s1", 2, 40) // 2 messages of 10 tokens
			f.snapshotNow("s1")
			f.seed("s1", 4, 40)
			out := runChat(t, f, nil, lines(tt.line), "--session", "s1", "--model", "llama3.1")
			if !strings.Contains(out.stdout, tt.want) {
				t.Errorf("%s printed:\n%s\nwant a line with %q\nstderr:\n%s", tt.line, out.stdout, tt.want, out.stderr)
			}
			if tt.check != nil {
				f.mu.Lock()
				defer f.mu.Unlock()
				tt.check(t, f)
			}
		})
	}
}

// TestSeed004_R9_StatusDisplay: /context shows every field of Requirement 9.
func TestSeed004_R9_StatusDisplay(t *testing.T) {
	f := newFakeProxy(t)
	f.seed("s1", 4, 100)
	out := runChat(t, f, nil, lines("/context"), "--session", "s1", "--model", "llama3.1")
	for _, field := range []struct{ req, re string }{
		{"R9.1 model name", `(?m)^Model +llama3\.1$`},
		{"R9.2 tokens and max with percentage", `(?m)^Tokens +100 / 1,000 \(10\.0%\)$`},
		{"R9.3 VRAM used and total with percentage", `(?m)^VRAM +5\.1 / 24\.0 GiB \(21\.2%\)$`},
		{"R9.4 KV quantization and memory", `(?m)^KV cache +f16, 12\.5 MiB \(100 tokens × 128\.0 KiB\)$`},
		{"R9.5 snapshot count", `(?m)^Snapshots +0$`},
		{"R9.6 auto-compression and threshold", `(?m)^Auto-compress +on at 80% \(smart, down to 60%\)$`},
	} {
		if !regexp.MustCompile(field.re).MatchString(out.stdout) {
			t.Errorf("%s: no line matching %s in\n%s", field.req, field.re, out.stdout)
		}
	}
	if strings.Contains(out.stdout, "⚠") {
		t.Errorf("a warning indicator at 10%%:\n%s", out.stdout)
	}
}

// TestSeed004_R9_WarningIndicatorAbove80Percent: above 80% the status
// and the status line carry ⚠ and the seed 000 text.
func TestSeed004_R9_WarningIndicatorAbove80Percent(t *testing.T) {
	f := newFakeProxy(t)
	f.seed("s1", 2, 1700) // 850 tokens of 1000
	out := runChat(t, f, nil, lines("/context", "hi"), "--session", "s1", "--model", "llama3.1")
	if !regexp.MustCompile(`(?m)^Tokens +850 / 1,000 \(85\.0%\) ⚠$`).MatchString(out.stdout) {
		t.Errorf("no ⚠ on the tokens line:\n%s", out.stdout)
	}
	if !strings.Contains(out.stdout, "⚠ Context at 80% capacity. Consider /clear or /save.\n") {
		t.Errorf("no seed 000 warning under the status:\n%s", out.stdout)
	}
	bar := regexp.MustCompile(`(?m)^⚠ llama3\.1 · 85\d/1,000 tokens \(8\d%\) · VRAM 5\.1/24\.0 GiB \(21%\) · f16 · 0 snapshots · auto-compress at 80%$`)
	if !bar.MatchString(out.stderr) {
		t.Errorf("status line without ⚠:\n%s", out.stderr)
	}
}

// TestChatColors: colors follow --color, NO_COLOR and the terminal.
func TestChatColors(t *testing.T) {
	tests := []struct {
		mode, noColor string
		terminal      bool
		want          bool
	}{
		{"auto", "", true, true},
		{"auto", "1", true, false},
		{"auto", "", false, false},
		{"always", "1", false, true},
		{"never", "", true, false},
		{"", "", true, true},
	}
	for _, tt := range tests {
		got, err := view.UseColor(tt.mode, tt.noColor, tt.terminal)
		if err != nil || got != tt.want {
			t.Errorf("view.UseColor(%q, NO_COLOR=%q, terminal %v) = %v, %v; want %v", tt.mode, tt.noColor, tt.terminal, got, err, tt.want)
		}
	}
	if _, err := view.UseColor("sometimes", "", true); err == nil {
		t.Error("useColor accepted --color sometimes")
	}

	f := newFakeProxy(t)
	f.seed("s1", 2, 1640)
	plain := runChat(t, f, map[string]string{"NO_COLOR": "1"}, lines("hi", "/context"), "--session", "s1", "--model", "llama3.1")
	if strings.Contains(plain.both, "\x1b[") {
		t.Errorf("NO_COLOR output has escape codes:\n%q", plain.both)
	}
	if !strings.Contains(plain.stderr, "⚠ Context at 80% capacity. Consider /clear or /save.") {
		t.Errorf("NO_COLOR lost the warning text:\n%s", plain.stderr)
	}
	colored := runChat(t, f, map[string]string{"NO_COLOR": "1"}, lines("hi"), "--session", "s1", "--model", "llama3.1", "--color", "always")
	if !strings.Contains(colored.stderr, view.Dim) {
		t.Errorf("--color always beats NO_COLOR, but the status line is plain:\n%q", colored.stderr)
	}
}

// TestChatPipedStdin: lines end in LF or CRLF, the last may lack its
// newline, and end of input ends the chat cleanly.
func TestChatPipedStdin(t *testing.T) {
	f := newFakeProxy(t)
	out := runChat(t, f, nil, "first\r\n\n   \nlast without newline", "--session", "s1", "--model", "llama3.1", "--status=false")
	if want := "echo: first\necho: last without newline\n"; out.stdout != want {
		t.Errorf("stdout = %q, want %q", out.stdout, want)
	}
	if strings.Contains(out.stderr, "error") {
		t.Errorf("stderr: %s", out.stderr)
	}
}

// TestChatProxyDown: with nothing at --proxy every command says so in one
// line and the chat goes on to /quit.
func TestChatProxyDown(t *testing.T) {
	addr := freeAddr(t)
	var out, errw bytes.Buffer
	err := run(context.Background(), []string{"chat", "--proxy", "http://" + addr, "--model", "m", "--history", ""},
		envOf(nil), strings.NewReader(lines("hello", "/stats", "/context", "/quit")), &out, &errw)
	if err != nil {
		t.Fatalf("chat returned %v", err)
	}
	want := "error: cannot reach ctxproxy at http://" + addr + ": connection refused (is ctxproxy running?)\n"
	if n := strings.Count(errw.String(), want); n != 3 {
		t.Errorf("stderr:\n%s\nwant %q three times", errw.String(), want)
	}
}

// TestChatBackendErrors: a backend error, a broken stream and a missing
// model each show one error line; the chat goes on.
func TestChatBackendErrors(t *testing.T) {
	tests := []struct {
		name    string
		dialect string
		opts    fakebackend.Options
		args    []string
		want    string
	}{
		{"ollama 404", "ollama", fakebackend.Options{Status: 404, ErrorMessage: `model "nope" not found, try pulling it first`},
			nil, `error: model "nope" not found, try pulling it first (HTTP 404)`},
		{"openai 400", "openai", fakebackend.Options{Status: 400, ErrorMessage: "This model's maximum context length is 8192 tokens."},
			nil, "error: This model's maximum context length is 8192 tokens. (HTTP 400)"},
		{"ollama stream dies", "ollama", fakebackend.Options{Reply: "partial reply here", Chunks: 3, DieAfter: 2},
			nil, "error: the reply broke off before its end"},
		{"openai stream dies", "openai", fakebackend.Options{Reply: "partial reply here", Chunks: 3, DieAfter: 2},
			nil, "error: the reply broke off before its end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeProxy(t)
			f.setBackend(tt.opts)
			out := runChat(t, f, nil, lines("hello", "/model"), "--session", "s1", "--model", "llama3.1",
				"--dialect", tt.dialect, "--status=false")
			if !strings.Contains(out.stderr, tt.want+"\n") {
				t.Errorf("stderr:\n%s\nwant %q", out.stderr, tt.want)
			}
			if !strings.Contains(out.stdout, "Model: llama3.1.\n") {
				t.Errorf("the chat did not go on after the error:\n%s", out.stdout)
			}
		})
	}

	f := newFakeProxy(t)
	out := runChat(t, f, nil, lines("hello", "/model llama3.1", "hello again"), "--session", "s1")
	if !strings.Contains(out.stderr, "error: no model chosen") && strings.Count(out.stdout, "echo:") != 2 {
		// With one model at the backend the chat picks it; both work.
		t.Errorf("without --model:\nstdout %s\nstderr %s", out.stdout, out.stderr)
	}
}

// TestChatOpenAIDialect: --dialect openai posts to /v1/chat/completions
// and reads the SSE stream.
func TestChatOpenAIDialect(t *testing.T) {
	f := newFakeProxy(t)
	f.setBackend(fakebackend.Options{Reply: "streamed over SSE", Chunks: 4})
	out := runChat(t, f, nil, lines("hi"), "--session", "s1", "--model", "gpt-4o", "--dialect", "openai", "--api-key", "sk-test")
	if out.stdout != "streamed over SSE\n" {
		t.Errorf("stdout = %q", out.stdout)
	}
	chats := f.chatLog()
	if len(chats) != 1 || chats[0].path != "/v1/chat/completions" {
		t.Fatalf("chat requests %+v", chats)
	}
	if got := chats[0].header.Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("Authorization %q on the chat route, want the API key", got)
	}
}

// TestChatAdminTokenStaysOffChatRoutes: the admin token authorizes the
// context commands and never reaches the backend.
func TestChatAdminTokenStaysOffChatRoutes(t *testing.T) {
	f := newFakeProxy(t)
	f.token = "secret"
	out := runChat(t, f, map[string]string{"CTXPROXY_ADMIN_TOKEN": "secret"}, lines("hi", "/stats", "/model"),
		"--session", "s1", "--model", "llama3.1")
	if !strings.Contains(out.stdout, "Session    s1") {
		t.Errorf("/stats with the token:\n%s\n%s", out.stdout, out.stderr)
	}
	for _, r := range f.backend.Requests() {
		if r.Header.Get("Authorization") != "" {
			t.Errorf("%s %s reached the backend with Authorization %q", r.Method, r.Path, r.Header.Get("Authorization"))
		}
	}
	out = runChat(t, f, nil, lines("/stats"), "--session", "s1", "--model", "llama3.1")
	if !strings.Contains(out.stderr, "error: admin token required (HTTP 401): set --token or CTXPROXY_ADMIN_TOKEN") {
		t.Errorf("without the token:\n%s", out.stderr)
	}
}

// TestChatWithoutCtxproxy: answers without X-Ctxproxy-* headers (the URL
// is a plain backend) get one warning.
func TestChatWithoutCtxproxy(t *testing.T) {
	b := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "plain"})
	var out, errw bytes.Buffer
	err := run(context.Background(), []string{"chat", "--proxy", b.URL, "--model", "llama3.1:8b", "--history", "", "--status=false"},
		envOf(nil), strings.NewReader(lines("a", "b")), &out, &errw)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(errw.String(), "came without ctxproxy's headers"); n != 1 {
		t.Errorf("stderr:\n%s\nwant the warning once", errw.String())
	}
}

// TestChatThinking: a thinking model's thoughts show dimmed on a terminal
// and are left out of plain output, so scripts get only the answer.
func TestChatThinking(t *testing.T) {
	f := newFakeProxy(t)
	f.setBackend(fakebackend.Options{Reply: "42", Thinking: "Let me count."})
	plain := runChat(t, f, nil, lines("question"), "--session", "s1", "--model", "llama3.1", "--status=false")
	if plain.stdout != "42\n" {
		t.Errorf("plain stdout = %q, want only the answer", plain.stdout)
	}
	colored := runChat(t, f, nil, lines("question"), "--session", "s2", "--model", "llama3.1", "--status=false", "--color", "always")
	if want := view.Dim + "Let me count." + view.Reset + "\n\n42\n"; colored.stdout != want {
		t.Errorf("colored stdout = %q, want %q", colored.stdout, want)
	}
}

// TestChatFlags: bad flags and arguments are refused before anything runs.
func TestChatFlags(t *testing.T) {
	for _, args := range [][]string{
		{"chat", "extra"},
		{"chat", "--dialect", "anthropic"},
		{"chat", "--color", "sometimes"},
		{"chat", "--proxy", "localhost:11435"},
	} {
		var out, errw bytes.Buffer
		if err := run(context.Background(), args, envOf(nil), strings.NewReader(""), &out, &errw); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	var out, errw bytes.Buffer
	err := run(context.Background(), []string{"context", "-h"}, envOf(nil), strings.NewReader(""), &out, &errw)
	if err == nil || !strings.Contains(errw.String(), "ctxproxy context add --session S --importance 0.9") {
		t.Errorf("context -h: %v\n%s", err, errw.String())
	}
}
