package proxy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

func TestSetMember(t *testing.T) {
	cases := []struct{ name, in, key, value, want string }{
		{"replace keeps order and spacing", `{ "a" : 1 , "messages" : [1] , "z":2 }`, "messages", `[]`, `{ "a" : 1 , "messages" : [] , "z":2 }`},
		{"append", `{"a":1}`, "b", `"x"`, `{"a":1,"b":"x"}`},
		{"append to empty", `{ }`, "b", `2`, `{ "b":2}`},
		{"duplicate keys: last wins, as in encoding/json", `{"k":1,"k":2}`, "k", `3`, `{"k":1,"k":3}`},
		{"escaped key", `{"a\"b":{"c":"}"},"m":null}`, "m", `[]`, `{"a\"b":{"c":"}"},"m":[]}`},
		{"unicode key", `{"\u006d":1}`, "m", `2`, `{"\u006d":2}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := setMember([]byte(tc.in), tc.key, []byte(tc.value))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
			if !json.Valid(got) {
				t.Errorf("invalid JSON: %s", got)
			}
		})
	}
}

func TestRemoveMembers(t *testing.T) {
	drop := func(k string) bool { return k == "_preserve" || k == "_importance" }
	cases := []struct{ name, in, want string }{
		{"first", `{"_preserve":true,"role":"user"}`, `{"role":"user"}`},
		{"last", `{"role":"user","_importance":0.5}`, `{"role":"user"}`},
		{"middle with spaces", `{"a":1, "_preserve" : true , "b":2}`, `{"a":1, "b":2}`},
		{"both", `{"_importance":1,"role":"user","_preserve":false}`, `{"role":"user"}`},
		{"only", `{"_preserve":true}`, `{}`},
		{"none", `{"role":"user"}`, `{"role":"user"}`},
		{"nested keys stay", `{"x":{"_preserve":true},"_preserve":true}`, `{"x":{"_preserve":true}}`},
		{"last two", `{"x":1,"_preserve":true,"_importance":1}`, `{"x":1}`},
		{"first two", `{"_preserve":true, "_importance":1, "x":1}`, `{"x":1}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := removeMembers([]byte(tc.in), drop)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestSetOption(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"no options", `{"model":"m","messages":[]}`, `{"model":"m","messages":[],"options":{"num_ctx":8192}}`},
		{"options kept", `{"options":{"temperature":0.1},"model":"m"}`, `{"options":{"temperature":0.1,"num_ctx":8192},"model":"m"}`},
		{"client num_ctx replaced", `{"options":{"num_ctx":2048,"seed":1}}`, `{"options":{"num_ctx":8192,"seed":1}}`},
		{"options null", `{"options":null}`, `{"options":{"num_ctx":8192}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := setOption([]byte(tc.in), "num_ctx", []byte("8192"))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// The nesting bound is jsonscan.ValidDepth's (one pass with validation):
// brackets inside strings do not count, and limit levels are allowed.
func TestValidDepth(t *testing.T) {
	if _, err := jsonscan.ValidDepth([]byte(`{"a":"[[[[[[[[[[[[["}`), 3); err != nil {
		t.Errorf("brackets inside strings counted: %v", err)
	}
	if _, err := jsonscan.ValidDepth([]byte(`[[[[1]]]]`), 3); !errors.Is(err, jsonscan.ErrDepth) {
		t.Errorf("4 levels with a limit of 3: %v, want ErrDepth", err)
	}
	if _, err := jsonscan.ValidDepth([]byte(`[[[1]]]`), 3); err != nil {
		t.Errorf("3 levels with a limit of 3: %v", err)
	}
}

func TestDecodeChat(t *testing.T) {
	body := `{"model":"gpt-4o","max_completion_tokens":300,"max_tokens":100,"tools":[{"type":"function"}],"messages":[
		{"role":"developer","content":"Be kind."},
		{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:,"}},{"type":"text","text":"here"},{"type":"mystery"}],"name":"ann"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"42","_preserve":true,"_importance":1.5}]}`
	req, err := decodeChat(OpenAI, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if req.model != "gpt-4o" || req.stream || req.maxOutput != 300 || string(req.tools) != `[{"type":"function"}]` {
		t.Errorf("top level: %+v", req)
	}
	if req.firstSystem != "Be kind." || req.firstUser != "look\nhere" || !req.annotated {
		t.Errorf("first system %q, first user %q, annotated %v", req.firstSystem, req.firstUser, req.annotated)
	}
	want := []rewrite.Message{
		{Role: "developer", Content: "Be kind."},
		{Role: "user", Content: "look\nhere", Name: "ann", Images: 1},
		{Role: "assistant", ToolCalls: []rewrite.ToolCall{{ID: "c1", Name: "f", Arguments: `{"a":1}`}}},
		{Role: "tool", ToolCallID: "c1", Content: "42", Preserve: true, Importance: 1, HasImportance: true,
			Raw: json.RawMessage(`{"role":"tool","tool_call_id":"c1","content":"42"}`)},
	}
	if diff := cmp.Diff(want, req.messages, cmpopts.IgnoreFields(rewrite.Message{}, "Raw")); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	if got := string(req.messages[3].Raw); got != string(want[3].Raw) {
		t.Errorf("annotations not removed from raw: %s", got)
	}

	ollama := `{"model":"llama3.1","messages":[{"role":"assistant","tool_calls":[{"function":{"name":"g","arguments":{"x":[1,2]}}}]},{"role":"user","content":"hi","images":["a","b"]}],"options":{"num_ctx":8192,"num_predict":64}}`
	req, err = decodeChat(Ollama, []byte(ollama))
	if err != nil {
		t.Fatal(err)
	}
	if !req.stream || req.numCtx != 8192 || req.maxOutput != 64 {
		t.Errorf("ollama top level: stream %v numCtx %d maxOutput %d", req.stream, req.numCtx, req.maxOutput)
	}
	if g := req.messages[0].ToolCalls[0].Arguments; g != `{"x":[1,2]}` {
		t.Errorf("ollama arguments = %s", g)
	}
	if req.messages[1].Images != 2 {
		t.Errorf("images = %d", req.messages[1].Images)
	}
}

func TestDecodeChatBadInput(t *testing.T) {
	for _, body := range []string{
		``, `null`, `[]`, `{"messages":{}}`, `{"messages":[1]}`, `{"messages":[{"role":""}]}`,
		`{"messages":[{"role":"user","content":{"a":1}}]}`, `{"messages":[{"role":"user","content":"` + "\xff" + `"}]}`,
		`{"model":5,"messages":[]}`,
	} {
		if _, err := decodeChat(OpenAI, []byte(body)); err == nil && !strings.Contains(body, "\xff") {
			t.Errorf("decodeChat(%q) succeeded", body)
		}
	}
	// Invalid UTF-8 inside a string is accepted (replaced), never a panic.
	if _, err := decodeChat(OpenAI, []byte("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}")); err != nil {
		t.Errorf("invalid UTF-8: %v", err)
	}
}

func TestEncodeMessages(t *testing.T) {
	msgs := []rewrite.Message{
		{Role: "system", Content: "S", Raw: json.RawMessage(`{"role":"system","content":"S","x":1}`)},
		{Role: "user", Content: "[3 messages omitted]", Synthetic: true},
		{Role: "tool", Content: "short", Edited: true, Raw: json.RawMessage(`{"role":"tool","tool_call_id":"c","content":"very long"}`)},
		{Role: "user", Content: "new text", Edited: true, Raw: json.RawMessage(
			`{"role":"user","content":[{"type":"text","text":"old"},{"type":"image_url","image_url":{"url":"u"}},{"type":"text","text":"old2"}]}`)},
	}
	got, err := encodeMessages(msgs)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"role":"system","content":"S","x":1},{"role":"user","content":"[3 messages omitted]"},` +
		`{"role":"tool","tool_call_id":"c","content":"short"},` +
		`{"role":"user","content":[{"type":"text","text":"new text"},{"type":"image_url","image_url":{"url":"u"}}]}]`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func FuzzJSONEdit(f *testing.F) {
	for _, s := range []string{`{"a":1,"messages":[],"options":{"num_ctx":1}}`, `{}`, `{"_preserve":true,"b":[{"c":"\"}"}]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !json.Valid([]byte(s)) {
			return
		}
		var v any
		if json.Unmarshal([]byte(s), &v) != nil {
			return
		}
		if _, ok := v.(map[string]any); !ok {
			return
		}
		out, err := setMember([]byte(s), "messages", []byte(`[1]`))
		if err != nil || !json.Valid(out) {
			t.Fatalf("setMember(%q) = %q, %v", s, out, err)
		}
		out, err = removeMembers([]byte(s), func(k string) bool { return strings.HasPrefix(k, "_") })
		if err != nil || !json.Valid(out) {
			t.Fatalf("removeMembers(%q) = %q, %v", s, out, err)
		}
		out, err = setOption([]byte(s), "num_ctx", []byte("2048"))
		if err != nil || !json.Valid(out) {
			t.Fatalf("setOption(%q) = %q, %v", s, out, err)
		}
	})
}
