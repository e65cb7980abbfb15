package translate

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"
)

// TestAnthropicThinkAsOllama: thinking and output_config map to think as
// the /v1/messages layer of each Ollama version does (0.17.4 knows only
// "enabled"; 0.24 and later also "disabled" and the effort levels), and a
// model without the thinking capability has thinking dropped, as Ollama's
// own layer relaxes it for Claude Code.
func TestAnthropicThinkAsOllama(t *testing.T) {
	const base = `{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name, extra, version string
		noThinking           bool
		want                 string // the think member, "" for none
	}{
		{"enabled", `,"thinking":{"type":"enabled","budget_tokens":2048}`, "0.17.4", false, "true"},
		{"adaptive old", `,"thinking":{"type":"adaptive"}`, "0.17.4", false, ""},
		{"adaptive new", `,"thinking":{"type":"adaptive"}`, "0.34.3", false, ""},
		{"disabled old", `,"thinking":{"type":"disabled"}`, "0.17.4", false, ""},
		{"disabled new", `,"thinking":{"type":"disabled"}`, "0.24.0", false, "false"},
		{"disabled unknown version", `,"thinking":{"type":"disabled"}`, "", false, "false"},
		{"unknown type", `,"thinking":{"type":"sometimes"}`, "0.34.3", false, ""},
		{"effort", `,"output_config":{"effort":" High "}`, "0.34.3", false, `"high"`},
		{"effort xhigh", `,"thinking":{"type":"adaptive"},"output_config":{"effort":"xhigh"}`, "0.34.3", false, `"high"`},
		{"effort max", `,"output_config":{"effort":"max"}`, "0.30.0", false, `"max"`},
		{"effort old", `,"output_config":{"effort":"high"}`, "0.17.4", false, ""},
		{"effort unknown", `,"output_config":{"effort":"turbo"}`, "0.34.3", false, ""},
		{"enabled wins over effort", `,"thinking":{"type":"enabled"},"output_config":{"effort":"low"}`, "0.34.3", false, "true"},
		{"relaxed", `,"thinking":{"type":"enabled"}`, "0.17.4", true, ""},
		{"relaxed effort", `,"output_config":{"effort":"low"}`, "0.34.3", true, ""},
		{"false stays", `,"thinking":{"type":"disabled"}`, "0.34.3", true, "false"},
		{"think extra wins", `,"think":"low","thinking":{"type":"enabled"}`, "0.34.3", false, `"low"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := MessagesRequest([]byte(base+c.extra+"}"), RequestOptions{Version: c.version, NoThinking: c.noThinking})
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Think json.RawMessage `json:"think"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if string(got.Think) != c.want {
				t.Errorf("think = %s, want %q\n%s", got.Think, c.want, out)
			}
			if c.want == `"max"` {
				return // a level of newer Ollama versions than ctxproxy's api package
			}
			var chat api.ChatRequest
			if err := json.Unmarshal(out, &chat); err != nil {
				t.Fatalf("Ollama cannot decode the translation: %v", err)
			}
		})
	}
	if _, _, err := MessagesRequest([]byte(base+`,"thinking":"on"}`), RequestOptions{}); err == nil {
		t.Error("a thinking that is not an object was accepted; Ollama refuses it")
	}
}

// TestMessagesRolesAsOllama: a system entry among the messages (Claude
// Code sends them) stays where it is, roles are read in any case, and
// another role goes to the template as it is, as Ollama's /v1/messages
// does, even none.
func TestMessagesRolesAsOllama(t *testing.T) {
	body := `{"model":"m","max_tokens":64,"system":"top","messages":[
		{"role":"user","content":"one"},
		{"role":"system","content":[{"type":"text","text":"reminder","cache_control":{"type":"ephemeral"}}]},
		{"role":"Assistant","content":"two"},
		{"role":"user","content":"three"}]}`
	out, _, err := MessagesRequest([]byte(body), RequestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var chat api.ChatRequest
	if err := json.Unmarshal(out, &chat); err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range chat.Messages {
		roles = append(roles, m.Role+":"+m.Content)
	}
	want := []string{"system:top", "user:one", "system:reminder", "assistant:two", "user:three"}
	if len(roles) != len(want) {
		t.Fatalf("messages %q, want %q", roles, want)
	}
	for i := range want {
		if roles[i] != want[i] {
			t.Errorf("message %d = %q, want %q", i, roles[i], want[i])
		}
	}
	// A message without a role is handed to the template with none, as
	// Ollama's /v1/messages hands it (0.17.4 and 0.34.3 answer it).
	out, _, err = MessagesRequest([]byte(`{"model":"m","max_tokens":64,"messages":[{"content":"x"}]}`), RequestOptions{})
	if err != nil || !strings.Contains(string(out), `{"role":"","content":"x"}`) {
		t.Errorf("a message without a role: %v\n%s", err, out)
	}
}

// TestMessagesBlocksAsOllama: blocks Ollama's /v1/messages leaves out are
// dropped (and listed), not refused; a server tool's call and results
// become a tool call and a tool message after it.
func TestMessagesBlocksAsOllama(t *testing.T) {
	body := `{"model":"m","max_tokens":64,"messages":[
		{"role":"user","content":[{"type":"text","text":"look"},{"type":"document","source":{"type":"text","data":"x"}}]},
		{"role":"assistant","content":[
			{"type":"server_tool_use","id":"srv_1","name":"web_search","input":{"query":"go"}},
			{"type":"web_search_tool_result","tool_use_id":"srv_1","content":[{"type":"web_search_result","title":"Go","url":"https://go.dev"}]},
			{"type":"text","text":"found"}]},
		{"role":"user","content":"thanks"}],
		"tool_choice":{"type":"sometimes"}}`
	out, info, err := MessagesRequest([]byte(body), RequestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var chat api.ChatRequest
	if err := json.Unmarshal(out, &chat); err != nil {
		t.Fatal(err)
	}
	if len(chat.Messages) != 4 {
		t.Fatalf("%d messages, want 4: %s", len(chat.Messages), out)
	}
	if m := chat.Messages[1]; m.Role != "assistant" || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "web_search" || m.Content != "found" {
		t.Errorf("assistant message = %+v", m)
	}
	if m := chat.Messages[2]; m.Role != "tool" || m.Content != "- Go: https://go.dev\n" || m.ToolCallID != "srv_1" || m.ToolName != "web_search" {
		t.Errorf("tool message = %+v", m)
	}
	var fields []string
	for _, d := range info.Dropped {
		fields = append(fields, d.Field)
	}
	if len(fields) != 2 || fields[0] != "messages[0].content[1]" || fields[1] != "tool_choice" {
		t.Errorf("dropped %q, want the document block and tool_choice", fields)
	}
}
