package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/report"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/ctxproxy/ctxproxy/testkit/proxytest"
)

// The REPL itself is tested in package repl; these tests cover what
// "ctxproxy chat" adds: flags, environment variables and exit codes.

// lines is script with a newline after each line.
func lines(l ...string) string { return strings.Join(l, "\n") + "\n" }

// runChat runs "ctxproxy chat ARGS" with env and script as its stdin.
func runChat(t *testing.T, env map[string]string, script string, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errw syncBuffer
	if env == nil {
		env = map[string]string{}
	}
	env["TZ"] = "UTC"
	err := run(context.Background(), append([]string{"chat", "--history", ""}, args...), envOf(env), strings.NewReader(script),
		&out, &errw)
	if err != nil {
		t.Fatalf("chat: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errw.String())
	}
	return out.String(), errw.String()
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
		got, err := report.UseColor(tt.mode, tt.noColor, tt.terminal)
		if err != nil || got != tt.want {
			t.Errorf("report.UseColor(%q, NO_COLOR=%q, terminal %v) = %v, %v; want %v", tt.mode, tt.noColor, tt.terminal, got, err, tt.want)
		}
	}
	if _, err := report.UseColor("sometimes", "", true); err == nil {
		t.Error("useColor accepted --color sometimes")
	}

	// Trimming only at 100%, so that the 80% warning shows.
	p := proxytest.Start(t, proxytest.Options{Strategy: rewrite.Config{Mode: "smart", Threshold: 1, Target: 0.6},
		Models:  map[string]budget.Model{"llama3.1": {MaxTokens: 1100, MaxOutputTokens: 100}},
		Backend: fakebackend.Options{Reply: "ok", Tokenize: func(s string) int { return (len(s) + 3) / 4 }}})
	p.Seed(t, "s1", "llama3.1", snapshots.Message{Role: "user", Content: strings.Repeat("x", 3280)})
	env := map[string]string{"NO_COLOR": "1", "CTXPROXY_PROXY": p.URL}
	out, errOut := runChat(t, env, lines("hi", "/context"), "--session", "s1", "--model", "llama3.1")
	if strings.Contains(out+errOut, "\x1b[") {
		t.Errorf("NO_COLOR output has escape codes:\n%q\n%q", out, errOut)
	}
	if !strings.Contains(errOut, "⚠ Context at 80% capacity. Consider /clear or /save.") {
		t.Errorf("NO_COLOR lost the warning text:\n%s", errOut)
	}
	_, errOut = runChat(t, env, lines("hi"), "--session", "s1", "--model", "llama3.1", "--color", "always")
	if !strings.Contains(errOut, report.Dim) {
		t.Errorf("--color always beats NO_COLOR, but the status line is plain:\n%q", errOut)
	}
}

// TestChatEnvironment: the proxy, the admin token and the API key come
// from the environment when no flag sets them.
func TestChatEnvironment(t *testing.T) {
	p := proxytest.Start(t, proxytest.Options{AdminToken: "secret", Backend: fakebackend.Options{Reply: "hello"}})
	out, errOut := runChat(t, map[string]string{"CTXPROXY_PROXY": p.URL, "CTXPROXY_ADMIN_TOKEN": "secret", "CTXPROXY_API_KEY": "sk-env"},
		lines("hi", "/stats"), "--session", "s1", "--model", "llama3.1")
	if !strings.Contains(out, "hello\n") || !strings.Contains(out, "Session       s1\n") || strings.Contains(errOut, "error") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", out, errOut)
	}
	if last, ok := p.Backend.Last("/api/chat"); !ok || last.Header.Get("Authorization") != "Bearer sk-env" {
		t.Errorf("CTXPROXY_API_KEY did not reach the backend: %v", last.Header)
	}
	_, errOut = runChat(t, map[string]string{"CTXPROXY_PROXY": p.URL}, lines("/stats"), "--session", "s1", "--token", "secret")
	if strings.Contains(errOut, "error") {
		t.Errorf("--token: %s", errOut)
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
