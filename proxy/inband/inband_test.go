package inband

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestInbandCommand(t *testing.T) {
	user := func(text string) []rewrite.Message { return []rewrite.Message{{Role: "user", Content: text}} }
	for _, tc := range []struct {
		name string
		msgs []rewrite.Message
		cmd  string
		args []string
		ok   bool
	}{
		{"status", user("/context"), "context status", []string{}, true},
		{"spaces around", user("  /context  \n"), "context status", []string{}, true},
		{"stats", user("/context stats"), "context stats", []string{}, true},
		{"size", user("/context size 8192"), "context size", []string{"8192"}, true},
		{"size without a number", user("/context size"), "context size", []string{}, true},
		{"restore", user("/context restore 20260101-000000-abcdef"), "context restore", []string{"20260101-000000-abcdef"}, true},
		{"short clear", user("/clear"), "clear", nil, true},
		{"short stats", user("/stats"), "stats", nil, true},
		{"unknown subcommand", user("/context please"), "", nil, false},
		{"a sentence", user("/context clear is what I typed, what does it do?"), "", nil, false},
		{"not first", user("please /context"), "", nil, false},
		{"case matters", user("/Context"), "", nil, false},
		{"clear with words", user("/clear the table"), "", nil, false},
		{"assistant", []rewrite.Message{{Role: "assistant", Content: "/context"}}, "", nil, false},
		{"older user message", []rewrite.Message{{Role: "user", Content: "/context"}, {Role: "assistant", Content: "…"},
			{Role: "user", Content: "thanks"}}, "", nil, false},
		{"tool result last", []rewrite.Message{{Role: "user", Content: "/context"}, {Role: "tool", Content: "x"}}, "", nil, false},
		{"empty", nil, "", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, args, ok := Command(httptest.NewRequest("POST", "/api/chat", nil), &wire.Request{Messages: tc.msgs})
			if cmd != tc.cmd || ok != tc.ok || (ok && !cmp.Equal(args, tc.args, cmpopts.EquateEmpty())) {
				t.Errorf("got %q %q %v, want %q %q %v", cmd, args, ok, tc.cmd, tc.args, tc.ok)
			}
		})
	}
}

// TestInbandHistory: a client that resends its whole history keeps
// ctxproxy's exchanges in it; they never reach the model, and a clear
// holds for such a client: the next prompt starts fresh.
func TestInbandHistory(t *testing.T) {
	m := func(role, content string) rewrite.Message { return rewrite.Message{Role: role, Content: content} }
	contents := func(msgs []rewrite.Message) string {
		var out []string
		for _, x := range msgs {
			out = append(out, x.Role+":"+x.Content)
		}
		return strings.Join(out, " | ")
	}
	cases := []struct {
		name string
		in   []rewrite.Message
		want string
	}{
		{"no commands", []rewrite.Message{m("system", "S"), m("user", "a"), m("assistant", "b"), m("user", "c")},
			"system:S | user:a | assistant:b | user:c"},
		{"status exchange dropped", []rewrite.Message{m("user", "a"), m("assistant", "b"), m("user", "/context"),
			m("assistant", "Session demo ..."), m("user", "c")},
			"user:a | assistant:b | user:c"},
		{"clear drops what came before, system stays", []rewrite.Message{m("system", "S"), m("user", "a"), m("assistant", "b"),
			m("user", "/clear"), m("assistant", "Context cleared."), m("user", "c"), m("assistant", "d"), m("user", "e")},
			"system:S | user:c | assistant:d | user:e"},
		{"the last clear wins", []rewrite.Message{m("user", "a"), m("assistant", "b"), m("user", "/context clear"),
			m("assistant", "Context cleared."), m("user", "c"), m("assistant", "d"), m("user", "/clear"),
			m("assistant", "Context cleared."), m("user", "e")},
			"user:e"},
		{"the newest message stays even if it looks like a command", []rewrite.Message{m("user", "a"), m("assistant", "b"),
			m("user", "/stats")}, "user:a | assistant:b | user:/stats"},
		{"a command without an answer is the user's text", []rewrite.Message{m("user", "/clear"), m("user", "a")},
			"user:/clear | user:a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, changed := History(tc.in)
			if g := contents(got); g != tc.want {
				t.Errorf("got  %s\nwant %s", g, tc.want)
			}
			if changed != (contents(tc.in) != tc.want) {
				t.Errorf("changed = %v", changed)
			}
		})
	}
}

func TestInbandCompactCommand(t *testing.T) {
	tests := []struct {
		content string
		cmd     string
		args    []string
	}{
		{"/compact", "compact", []string{}},
		{"/compact keep the file names", "compact", []string{"keep", "the", "file", "names"}},
		{"please /compact", "", nil},
	}
	for _, tt := range tests {
		cmd, args, ok := commandOf(&rewrite.Message{Role: "user", Content: tt.content})
		if cmd != tt.cmd || ok != (tt.cmd != "") || strings.Join(args, " ") != strings.Join(tt.args, " ") {
			t.Errorf("%q: %q %q %v", tt.content, cmd, args, ok)
		}
	}
}
