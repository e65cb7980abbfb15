package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
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
			got, err := SetMember([]byte(tc.in), tc.key, []byte(tc.value))
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
			got, err := RemoveMembers([]byte(tc.in), drop)
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
	req, err := DecodeChat(OpenAI, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if req.Model != "gpt-4o" || req.Stream || req.MaxOutput != 300 || string(req.Tools) != `[{"type":"function"}]` {
		t.Errorf("top level: %+v", req)
	}
	if req.FirstSystem != "Be kind." || req.FirstUser != "look\nhere" || !req.Annotated {
		t.Errorf("first system %q, first user %q, annotated %v", req.FirstSystem, req.FirstUser, req.Annotated)
	}
	want := []chat.Message{
		{Role: "developer", Content: "Be kind."},
		{Role: "user", Content: "look\nhere", Name: "ann", Images: make([]chat.Image, 1)},
		{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: "c1", Name: "f", Arguments: `{"a":1}`}}},
		{Role: "tool", ToolCallID: "c1", Content: "42", Preserve: true, Importance: 1, HasImportance: true,
			Raw: json.RawMessage(`{"role":"tool","tool_call_id":"c1","content":"42"}`)},
	}
	if diff := cmp.Diff(want, req.Messages, cmpopts.IgnoreFields(chat.Message{}, "Raw")); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	if got := string(req.Messages[3].Raw); got != string(want[3].Raw) {
		t.Errorf("annotations not removed from raw: %s", got)
	}

	ollama := `{"model":"llama3.1","messages":[{"role":"assistant","tool_calls":[{"function":{"name":"g","arguments":{"x":[1,2]}}}]},{"role":"user","content":"hi","images":["a","b"]}],"options":{"num_ctx":8192,"num_predict":64}}`
	req, err = DecodeChat(Ollama, []byte(ollama))
	if err != nil {
		t.Fatal(err)
	}
	if !req.Stream || req.NumCtx != 8192 || req.MaxOutput != 64 {
		t.Errorf("ollama top level: stream %v numCtx %d maxOutput %d", req.Stream, req.NumCtx, req.MaxOutput)
	}
	if g := req.Messages[0].ToolCalls[0].Arguments; g != `{"x":[1,2]}` {
		t.Errorf("ollama arguments = %s", g)
	}
	if len(req.Messages[1].Images) != 2 {
		t.Errorf("images = %d", len(req.Messages[1].Images))
	}
}

func TestDecodeChatBadInput(t *testing.T) {
	for _, body := range []string{
		``, `null`, `[]`, `{"messages":{}}`, `{"messages":[1]}`, `{"messages":[{"role":""}]}`,
		`{"messages":[{"role":"user","content":{"a":1}}]}`, `{"messages":[{"role":"user","content":"` + "\xff" + `"}]}`,
		`{"model":5,"messages":[]}`,
	} {
		if _, err := DecodeChat(OpenAI, []byte(body)); err == nil && !strings.Contains(body, "\xff") {
			t.Errorf("decodeChat(%q) succeeded", body)
		}
	}
	// Invalid UTF-8 inside a string is accepted (replaced), never a panic.
	if _, err := DecodeChat(OpenAI, []byte("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}")); err != nil {
		t.Errorf("invalid UTF-8: %v", err)
	}
}

func TestEncodeMessages(t *testing.T) {
	msgs := []chat.Message{
		{Role: "system", Content: "S", Raw: json.RawMessage(`{"role":"system","content":"S","x":1}`)},
		{Role: "user", Content: "[3 messages omitted]", Synthetic: true},
		{Role: "tool", Content: "short", Edited: true, Raw: json.RawMessage(`{"role":"tool","tool_call_id":"c","content":"very long"}`)},
		{Role: "user", Content: "new text", Edited: true, Raw: json.RawMessage(
			`{"role":"user","content":[{"type":"text","text":"old"},{"type":"image_url","image_url":{"url":"u"}},{"type":"text","text":"old2"}]}`)},
	}
	got, err := EncodeMessages(msgs)
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
		out, err := SetMember([]byte(s), "messages", []byte(`[1]`))
		if err != nil || !json.Valid(out) {
			t.Fatalf("setMember(%q) = %q, %v", s, out, err)
		}
		out, err = RemoveMembers([]byte(s), func(k string) bool { return strings.HasPrefix(k, "_") })
		if err != nil || !json.Valid(out) {
			t.Fatalf("removeMembers(%q) = %q, %v", s, out, err)
		}
		out, err = setOption([]byte(s), "num_ctx", []byte("2048"))
		if err != nil || !json.Valid(out) {
			t.Fatalf("setOption(%q) = %q, %v", s, out, err)
		}
	})
}

// Decoding a chat shares the message contents with the body instead of
// copying them: a 100 KB body cost 139 KB and 631 allocations to decode
// when every content was copied into a string.
func TestDecodeChatAllocs(t *testing.T) {
	body := chatBody100K()
	decode := func() {
		if _, err := DecodeChat(Ollama, body); err != nil {
			t.Fatal(err)
		}
	}
	if n := bytesPerRequest(20, decode); n > uint64(len(body))/2 {
		t.Errorf("%d bytes allocated to decode a %d-byte chat, want well under the body (are contents copied?)", n, len(body))
	}
	// Not one per message: a message's members are listed on the stack
	// (429 allocations with a slice per message and its keys copied), and
	// the array is walked once into a list sized up front (19 when its
	// elements were first listed).
	if n := testing.AllocsPerRun(20, decode); n > 14 {
		t.Errorf("%v allocations to decode a 101-message chat, want at most 14", n)
	}

	// The list is sized by counting braces: one message of 100 KB of
	// braces must not size it for thousands of messages.
	braces := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("{", 100<<10) + `"}]}`)
	if n := bytesPerRequest(20, func() {
		if _, err := DecodeChat(Ollama, braces); err != nil {
			t.Fatal(err)
		}
	}); n > uint64(len(braces))*2 {
		t.Errorf("%d bytes allocated to decode one message of %d braces, want under twice the body", n, len(braces))
	}
}

// DecodeString shares the bytes of an unescaped string and decodes an
// escaped one.
func TestDecodeStringShares(t *testing.T) {
	for in, want := range map[string]string{`""`: "", `"a"`: "a", `"a\"b"`: `a"b`, `"\u00e9t\u00e9"`: "été", `"héllo"`: "héllo"} {
		if got, err := DecodeString([]byte(in)); err != nil || got != want {
			t.Errorf("decodeString(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
	v := []byte(`"some content"`)
	if n := testing.AllocsPerRun(100, func() { _, _ = DecodeString(v) }); n > 0 {
		t.Errorf("%v allocations to decode an unescaped string, want none", n)
	}
}

// A message's members cost one allocation: keys of chat messages are
// constants, and the members' slice is sized for a message.
func TestMembersAllocs(t *testing.T) {
	msg := []byte(`{"role":"assistant","content":"hello","tool_calls":null,"name":"x"}`)
	if n := testing.AllocsPerRun(100, func() { _, _ = Members(msg) }); n > 1 {
		t.Errorf("%v allocations to list a message's members, want 1", n)
	}
	ms := mustMembers(t, []byte(`{"role":1,"r\u006fle":2,"other":3,"x\"y":4,"content" : 5}`))
	var keys []string
	for _, m := range ms {
		keys = append(keys, m.Key)
	}
	if got := strings.Join(keys, ","); got != `role,role,other,x"y,content` {
		t.Errorf("keys %s", got)
	}
}

func BenchmarkMembers(b *testing.B) {
	msg := []byte(`{"role":"assistant","content":"hello there","images":[]}`)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = Members(msg)
	}
}

// pngBase64 is a 3×2 PNG in base64.
const pngBase64 = "iVBORw0KGgoAAAANSUhEUgAAAAMAAAACCAAAAAC4HznGAAAAEklEQVR4nGJiYGAAYUAAAAD//wAgAAWURUErAAAAAElFTkSuQmCC"

// Each image's size is read from its data, in either dialect; an image
// whose size cannot be read (a remote URL, not an image) is kept, with no
// size.
func TestDecodeChatImageSizes(t *testing.T) {
	ollama := `{"model":"m","messages":[{"role":"user","content":"hi","images":["` + pngBase64 + `","bm90IGFuIGltYWdl"]}]}`
	openai := `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"},
		{"type":"image_url","image_url":{"url":"data:image/png;base64,` + pngBase64 + `"}},
		{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`
	want := []chat.Image{{Width: 3, Height: 2}, {}}
	for _, c := range []struct {
		d    Dialect
		body string
	}{{Ollama, ollama}, {OpenAI, openai}} {
		req, err := DecodeChat(c.d, []byte(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, req.Messages[0].Images); diff != "" {
			t.Errorf("dialect %v: images (-want +got):\n%s", c.d, diff)
		}
	}
}

// setOption sets options.<key> in an Ollama request body, one edit at a
// time: what Rebuild must agree with,, creating the
// options object when the request has none.
func setOption(body []byte, key string, value []byte) ([]byte, error) {
	ms, err := Members(body)
	if err != nil {
		return nil, err
	}
	if m, ok := FindMember(ms, "options"); ok && body[m.ValueStart] == '{' {
		opts, err := SetMember(body[m.ValueStart:m.End], key, value)
		if err != nil {
			return nil, err
		}
		return ReplaceValue(body, m, opts), nil
	}
	k := jsonscan.AppendString(nil, key)
	opts := append(append(append([]byte{'{'}, k...), ':'), value...)
	opts = append(opts, '}')
	return SetMember(body, "options", opts)
}
