package repl

import (
	"context"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/client"
	"github.com/ctxproxy/ctxproxy/proxy"
	"github.com/ctxproxy/ctxproxy/report"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/ctxproxy/ctxproxy/testkit/proxytest"
)

// contextFixtureWithSnapshot is session s1: one turn of two messages,
// snapshotted, then two turns more, about 70% of the window in all (over
// the strategy's target of 60%, under its threshold of 80%). It returns
// the snapshot's id.
func contextFixtureWithSnapshot(t *testing.T, p *proxytest.Proxy) string {
	t.Helper()
	converse(t, p, "s1", 1, 460)
	snap, _, err := newClient(t, p, "").Snapshot(context.Background(), "s1", "manual")
	if err != nil {
		t.Fatal(err)
	}
	converse(t, p, "s1", 1, 460)
	converse(t, p, "s1", 1, 460)
	if n := len(p.Session(t, "s1").Messages); n != 6 {
		t.Fatalf("fixture: %d messages, want 6", n)
	}
	return snap.ID
}

// TestChatContextSubcommands: each /context subcommand prints its answer
// and does its job, checked on the server's state.
func TestChatContextSubcommands(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		line string // SNAP stands for the fixture's snapshot
		want string // a regular expression; SNAP as in line
		// check looks at the proxy after the command.
		check func(t *testing.T, p *proxytest.Proxy, c *client.Client)
	}{
		{"status", "/context", `(?m)^VRAM +5\.1 / 24\.0 GiB \(21\.2%\)$`, nil},
		{"size", "/context size 4096", `Context size: 4,096 tokens \(auto sizing off\)\.`, func(t *testing.T, p *proxytest.Proxy, c *client.Client) {
			if s, _, err := c.ContextSize(ctx); err != nil || s.Auto || s.Target != 4096 {
				t.Errorf("size: %+v %v", s, err)
			}
		}},
		{"auto", "/context auto", `Context size: auto, from free VRAM \(1,100 tokens now\)\.`, func(t *testing.T, p *proxytest.Proxy, c *client.Client) {
			if s, _, err := c.ContextSize(ctx); err != nil || !s.Auto {
				t.Errorf("auto sizing is off: %+v %v", s, err)
			}
		}},
		{"snapshot", "/context snapshot", `Saved snapshot \S+ \(6 messages, \d+ tokens\)\.`, func(t *testing.T, p *proxytest.Proxy, c *client.Client) {
			if s, _ := p.Store.ListSnapshots(ctx, "s1"); len(s) != 2 || s[0].Reason != "manual" || s[0].Messages != 6 {
				t.Errorf("snapshots %+v: want a second, manual one of 6 messages", s)
			}
		}},
		{"restore", "/context restore SNAP", `Restored snapshot SNAP: 2 messages\.`, func(t *testing.T, p *proxytest.Proxy, c *client.Client) {
			if n := len(p.Session(t, "s1").Messages); n != 2 {
				t.Errorf("%d messages after restore, want 2", n)
			}
		}},
		{"list", "/context list", `(?m)^SNAP  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d  manual  2 +1\d\d +1\d% `, nil},
		{"clear", "/context clear", `Context cleared\.`, func(t *testing.T, p *proxytest.Proxy, c *client.Client) {
			if n := len(p.Session(t, "s1").Messages); n != 0 {
				t.Errorf("%d messages after clear", n)
			}
		}},
		{"compress", "/context compress", `Compressed: \d+ → \d+ tokens \([1-5] messages? dropped, 0 summarized\)\.`, func(t *testing.T, p *proxytest.Proxy, c *client.Client) {
			// The dropped messages are replaced by markers, so count tokens.
			if s := p.Session(t, "s1"); s.Stats.Dropped == 0 || s.Stats.Tokens >= 821 {
				t.Errorf("after compress: %d dropped, %d tokens; want some dropped and fewer tokens", s.Stats.Dropped, s.Stats.Tokens)
			}
		}},
		{"compact", "/compact keep the numbers", `(?s)Compressed: \d+ → \d+ tokens \([1-5] messages? dropped, 0 summarized\)\..*The instructions were not used: nothing was summarized \(strategy\.mode smart\)\.`, func(t *testing.T, p *proxytest.Proxy, c *client.Client) {
			if s := p.Session(t, "s1"); s.Stats.Dropped == 0 {
				t.Errorf("after /compact: nothing dropped")
			}
		}},
		{"stats", "/context stats", `Model memory  6\.0 GiB \(5\.0 GiB in VRAM\)`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := start(t, proxytest.Options{})
			snap := contextFixtureWithSnapshot(t, p)
			line := strings.ReplaceAll(tt.line, "SNAP", snap)
			out := runChat(t, p, chatRun{session: "s1", model: "llama3.1"}, lines(line))
			want := regexp.MustCompile(strings.ReplaceAll(tt.want, "SNAP", regexp.QuoteMeta(snap)))
			if !want.MatchString(out.stdout) {
				t.Errorf("%s printed:\n%s\nwant a line matching %s\nstderr:\n%s", line, out.stdout, want, out.stderr)
			}
			if tt.check != nil {
				tt.check(t, p, newClient(t, p, ""))
			}
		})
	}
}

// TestChatContextStatusFields: /context shows the model, tokens against the
// limit, VRAM, the KV cache, snapshots and auto-compression.
func TestChatContextStatusFields(t *testing.T) {
	p := start(t, proxytest.Options{})
	converse(t, p, "s1", 3, 130) // about 100 tokens as sent
	out := runChat(t, p, chatRun{session: "s1", model: "llama3.1"}, lines("/context"))
	for _, field := range []struct{ req, re string }{
		{"model name", `(?m)^Model +llama3\.1$`},
		{"tokens and max with percentage", `(?m)^Tokens +1\d\d / 1,000 \(1\d\.\d%\)$`},
		{"VRAM used and total with percentage", `(?m)^VRAM +5\.1 / 24\.0 GiB \(21\.2%\)$`},
		{"KV quantization and memory", `(?m)^KV cache +f16, 1\d\.\d MiB \(1\d\d tokens × 128\.0 KiB\)$`},
		{"snapshot count", `(?m)^Snapshots +0$`},
		{"auto-compression and threshold", `(?m)^Auto-compress +on at 80% \(smart, down to 60%\)$`},
	} {
		if !regexp.MustCompile(field.re).MatchString(out.stdout) {
			t.Errorf("%s: no line matching %s in\n%s", field.req, field.re, out.stdout)
		}
	}
	if strings.Contains(out.stdout, "⚠") {
		t.Errorf("a warning indicator at 10%%:\n%s", out.stdout)
	}
}

// TestChatWarningIndicatorFrom80Percent: above 80% the status and the
// status line carry ⚠ and the capacity warning.
func TestChatWarningIndicatorFrom80Percent(t *testing.T) {
	o := trimAtLimit
	o.Backend.Reply = "ok"
	p := start(t, o)
	converse(t, p, "s1", 1, 3400) // about 850 tokens of 1,000
	out := runChat(t, p, chatRun{session: "s1", model: "llama3.1"}, lines("/context", "hi"))
	if !regexp.MustCompile(`(?m)^Tokens +85\d / 1,000 \(85\.\d%\) ⚠$`).MatchString(out.stdout) {
		t.Errorf("no ⚠ on the tokens line:\n%s", out.stdout)
	}
	if !strings.Contains(out.stdout, "⚠ Context at 80% capacity. Consider /clear or /save.\n") {
		t.Errorf("no capacity warning under the status:\n%s", out.stdout)
	}
	// Past snapshots.auto_threshold (80%) the turn took a snapshot.
	bar := regexp.MustCompile(`(?m)^⚠ llama3\.1 · 8\d\d/1,000 tokens \(8\d%\) · VRAM 5\.1/24\.0 GiB \(21%\) · f16 · 1 snapshot · auto-compress at 100%$`)
	if !bar.MatchString(out.stderr) {
		t.Errorf("status line without ⚠:\n%s", out.stderr)
	}
}

// TestChatPalette: without colors there are no escape codes and the
// warnings keep their text; with them the status line is dimmed.
func TestChatPalette(t *testing.T) {
	p := start(t, trimAtLimit)
	p.Seed(t, "s1", "llama3.1", turns(2, 1640)...)
	plain := runChat(t, p, chatRun{session: "s1", model: "llama3.1"}, lines("hi", "/context"))
	if strings.Contains(plain.both, "\x1b[") {
		t.Errorf("plain output has escape codes:\n%q", plain.both)
	}
	if !strings.Contains(plain.stderr, "⚠ Context at 80% capacity. Consider /clear or /save.") {
		t.Errorf("plain output lost the warning text:\n%s", plain.stderr)
	}
	colored := runChat(t, p, chatRun{session: "s1", model: "llama3.1", color: true}, lines("hi"))
	if !strings.Contains(colored.stderr, report.Dim) {
		t.Errorf("colored, but the status line is plain:\n%q", colored.stderr)
	}
}

// TestChatPipedStdin: lines end in LF or CRLF, the last may lack its
// newline, and end of input ends the chat cleanly.
func TestChatPipedStdin(t *testing.T) {
	p := start(t, proxytest.Options{})
	out := runChat(t, p, chatRun{session: "s1", model: "llama3.1", noBar: true}, "first\r\n\n   \nlast without newline")
	if want := "echo: first\necho: last without newline\n"; out.stdout != want {
		t.Errorf("stdout = %q, want %q", out.stdout, want)
	}
	if strings.Contains(out.stderr, "error") {
		t.Errorf("stderr: %s", out.stderr)
	}
}

// TestChatProxyDown: with nothing at the proxy's address every command
// says so in one line and the chat goes on to /quit.
func TestChatProxyDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	out := runChat(t, nil, chatRun{url: "http://" + addr, model: "m"}, lines("hello", "/stats", "/context", "/quit"))
	want := "error: cannot reach ctxproxy at http://" + addr + ": connection refused (is ctxproxy running?)\n"
	if n := strings.Count(out.stderr, want); n != 3 {
		t.Errorf("stderr:\n%s\nwant %q three times", out.stderr, want)
	}
}

// TestChatBackendErrors: a backend error, a broken stream and a missing
// model each show one error line; the chat goes on.
func TestChatBackendErrors(t *testing.T) {
	tests := []struct {
		name    string
		kind    fakebackend.Kind
		dialect string
		opts    fakebackend.Options
		want    string
	}{
		{"ollama 404", fakebackend.Ollama, client.DialectOllama,
			fakebackend.Options{Status: 404, ErrorMessage: `model "nope" not found, try pulling it first`},
			`error: model "nope" not found, try pulling it first (HTTP 404)`},
		{"openai 400", fakebackend.OpenAI, client.DialectOpenAI,
			fakebackend.Options{Status: 400, ErrorMessage: "Unsupported value: 'temperature' does not support 3.5."},
			"error: Unsupported value: 'temperature' does not support 3.5. (HTTP 400)"},
		// A refusal as too long is ctxproxy's to handle: it cuts and
		// retries, and says so when that does not help.
		{"openai overflow", fakebackend.OpenAI, client.DialectOpenAI,
			fakebackend.Options{Status: 400, ErrorMessage: "This model's maximum context length is 8192 tokens."},
			"error: the backend refused the prompt as longer than its context window 4 times; ctxproxy counted 9 tokens " +
				"for a limit of 1000 and cut it by up to 600 tokens more without success (the model's window may be " +
				"smaller than configured: see models: in the config) (HTTP 400)"},
		{"ollama stream dies", fakebackend.Ollama, client.DialectOllama,
			fakebackend.Options{Reply: "partial reply here", Chunks: 3, DieAfter: 2}, "error: the reply broke off before its end"},
		{"openai stream dies", fakebackend.OpenAI, client.DialectOpenAI,
			fakebackend.Options{Reply: "partial reply here", Chunks: 3, DieAfter: 2}, "error: the reply broke off before its end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := start(t, proxytest.Options{Kind: tt.kind, Backend: tt.opts})
			out := runChat(t, p, chatRun{session: "s1", model: "llama3.1", dialect: tt.dialect, noBar: true}, lines("hello", "/model"))
			if !strings.Contains(out.stderr, tt.want+"\n") {
				t.Errorf("stderr:\n%s\nwant %q", out.stderr, tt.want)
			}
			if !strings.Contains(out.stdout, "Model: llama3.1.\n") {
				t.Errorf("the chat did not go on after the error:\n%s", out.stdout)
			}
		})
	}

	// Without a model the chat takes the backend's only one.
	p := start(t, proxytest.Options{})
	out := runChat(t, p, chatRun{session: "s1", noBar: true}, lines("hello", "hello again"))
	if !strings.Contains(out.stderr, "· model llama3.1:8b ·") || out.stdout != "echo: hello\necho: hello again\n" {
		t.Errorf("without a model:\nstdout %s\nstderr %s", out.stdout, out.stderr)
	}
}

// TestChatOpenAIDialect: the OpenAI dialect posts to /v1/chat/completions
// with the API key and reads the SSE stream.
func TestChatOpenAIDialect(t *testing.T) {
	p := start(t, proxytest.Options{Kind: fakebackend.OpenAI, Backend: fakebackend.Options{Reply: "streamed over SSE", Chunks: 4}})
	rec := record(t, p.URL)
	out := runChat(t, p, chatRun{url: rec.url, session: "s1", model: "gpt-4o", dialect: client.DialectOpenAI, apiKey: "sk-test"}, lines("hi"))
	if out.stdout != "streamed over SSE\n" {
		t.Errorf("stdout = %q", out.stdout)
	}
	chats := rec.chats()
	if len(chats) != 1 || chats[0].path != "/v1/chat/completions" {
		t.Fatalf("chat requests %+v", chats)
	}
	if got := chats[0].header.Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("Authorization %q on the chat route, want the API key", got)
	}
	if last, ok := p.Backend.Last("/v1/chat/completions"); !ok || last.Header.Get("Authorization") != "Bearer sk-test" {
		t.Errorf("the backend did not get the API key: %v", last.Header)
	}
}

// TestChatAdminTokenStaysOffChatRoutes: the admin token authorizes the
// context commands and never reaches the backend.
func TestChatAdminTokenStaysOffChatRoutes(t *testing.T) {
	p := start(t, proxytest.Options{AdminToken: "secret"})
	out := runChat(t, p, chatRun{session: "s1", model: "llama3.1", token: "secret"}, lines("hi", "/stats", "/model"))
	if !regexp.MustCompile(`Session +s1\n`).MatchString(out.stdout) || strings.Contains(out.stderr, "error") {
		t.Errorf("/stats with the token:\n%s\n%s", out.stdout, out.stderr)
	}
	if len(backendChats(p)) != 1 {
		t.Errorf("the turn did not reach the backend")
	}
	for _, r := range p.Backend.Requests() {
		if r.Header.Get("Authorization") != "" {
			t.Errorf("%s %s reached the backend with Authorization %q", r.Method, r.Path, r.Header.Get("Authorization"))
		}
	}
	out = runChat(t, p, chatRun{session: "s1", model: "llama3.1"}, lines("/stats"))
	if !strings.Contains(out.stderr, "error: the admin API needs Authorization: Bearer <admin.token> (HTTP 401): "+
		"set --token or CTXPROXY_ADMIN_TOKEN to ctxproxy's admin.token\n") {
		t.Errorf("without the token:\n%s", out.stderr)
	}
}

// TestChatWithoutCtxproxy: answers without X-Ctxproxy-* headers (the URL
// is a plain backend) get one warning.
func TestChatWithoutCtxproxy(t *testing.T) {
	b := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "plain"})
	out := runChat(t, nil, chatRun{url: b.URL, model: "llama3.1:8b", noBar: true}, lines("a", "b"))
	if n := strings.Count(out.stderr, "came without ctxproxy's headers"); n != 1 {
		t.Errorf("stderr:\n%s\nwant the warning once", out.stderr)
	}
	if out.stdout != "plain\nplain\n" {
		t.Errorf("stdout = %q", out.stdout)
	}
}

// TestChatThinking: a thinking model's thoughts show dimmed with colors
// and are left out of plain output, so scripts get only the answer.
func TestChatThinking(t *testing.T) {
	p := start(t, proxytest.Options{Backend: fakebackend.Options{Reply: "42", Thinking: "Let me count."}})
	plain := runChat(t, p, chatRun{session: "s1", model: "llama3.1", noBar: true}, lines("question"))
	if plain.stdout != "42\n" {
		t.Errorf("plain stdout = %q, want only the answer", plain.stdout)
	}
	colored := runChat(t, p, chatRun{session: "s2", model: "llama3.1", noBar: true, color: true}, lines("question"))
	if want := report.Dim + "Let me count." + report.Reset + "\n\n42\n"; colored.stdout != want {
		t.Errorf("colored stdout = %q, want %q", colored.stdout, want)
	}
}

// TestChatFollowsScopedSession: with sessions scoped to the caller's
// credential (session.scope_header: Authorization, the default), the
// session is stored under "<id>~<hash>"; the chat takes that id from
// X-Ctxproxy-Session, so its commands find the conversation, and another
// key never sees it.
func TestChatFollowsScopedSession(t *testing.T) {
	p := start(t, proxytest.Options{Config: proxy.Config{ScopeHeaders: []string{"Authorization"}}})
	out := runChat(t, p, chatRun{session: "mine", model: "llama3.1", apiKey: "key-a", noBar: true},
		lines("hello", "/stats"))
	if strings.Contains(out.stdout, "is empty") || !strings.Contains(out.stdout, "Messages") {
		t.Fatalf("/stats after a turn with an API key:\n%s", out.both)
	}
	m := regexp.MustCompile(`Session +(mine~[0-9a-f]{16})`).FindStringSubmatch(out.stdout)
	if m == nil {
		t.Fatalf("/stats does not name the scoped session:\n%s", out.stdout)
	}
	if sess := p.Session(t, m[1]); len(sess.Messages) != 2 {
		t.Errorf("stored %d messages under %s, want 2", len(sess.Messages), m[1])
	}
	// Another key naming the same id talks in a session of its own: its
	// turn lands under its own scoped id, and key-a's is untouched.
	other := runChat(t, p, chatRun{session: "mine", model: "llama3.1", apiKey: "key-b", noBar: true},
		lines("hello again", "/stats"))
	mb := regexp.MustCompile(`Session +(mine~[0-9a-f]{16})`).FindStringSubmatch(other.stdout)
	if mb == nil || mb[1] == m[1] {
		t.Fatalf("key-b's session %v, key-a's %s:\n%s", mb, m[1], other.both)
	}
	if sess := p.Session(t, m[1]); len(sess.Messages) != 2 {
		t.Errorf("key-a's session has %d messages after key-b's turn, want 2", len(sess.Messages))
	}
	if sess := p.Session(t, mb[1]); len(sess.Messages) != 2 || sess.Messages[0].Content != "hello again" {
		t.Errorf("key-b's session: %+v", sess.Messages)
	}
}

// /model NAME takes a name as Ollama resolves it: no tag is ":latest".
func TestModelIn(t *testing.T) {
	names := []string{"llama3.1:latest", "qwen2.5:7b"}
	for name, want := range map[string]string{"llama3.1": "llama3.1:latest", "llama3.1:latest": "llama3.1:latest",
		"qwen2.5:7b": "qwen2.5:7b", "qwen2.5": "", "llama3.1:8b": ""} {
		if got, ok := modelIn(name, names); got != want || ok != (want != "") {
			t.Errorf("modelIn(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}
