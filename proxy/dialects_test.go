package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// responsesBody is a Responses API request: instructions, then turns of
// user and assistant message items; every third turn pair is a
// function_call with its function_call_output; it ends with a user item.
func responsesBody(model string, turns, size int, stream bool) []byte {
	var input []any
	for i := 0; i < turns; i++ {
		text := fmt.Sprintf("turn %d: ", i) + strings.Repeat(fmt.Sprintf("word%d ", i%7), size/6)
		input = append(input, map[string]any{"role": "user", "content": text})
		if i%3 == 1 {
			id := fmt.Sprintf("call_%d", i)
			input = append(input,
				map[string]any{"type": "function_call", "call_id": id, "name": "get_weather", "arguments": `{"city":"Paris"}`},
				map[string]any{"type": "function_call_output", "call_id": id, "output": "sunny " + text})
		}
		input = append(input, map[string]any{"type": "message", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": "reply " + text}}})
	}
	input = append(input, map[string]any{"role": "user", "content": "and now?"})
	b, _ := json.Marshal(map[string]any{"model": model, "instructions": "You are a careful assistant.",
		"input": input, "stream": stream, "tools": weatherTools(false)})
	return b
}

// messagesBody is the same conversation as an Anthropic Messages request.
func messagesBody(model string, turns, size int, stream bool) []byte {
	var msgs []any
	for i := 0; i < turns; i++ {
		text := fmt.Sprintf("turn %d: ", i) + strings.Repeat(fmt.Sprintf("word%d ", i%7), size/6)
		msgs = append(msgs, map[string]any{"role": "user", "content": text})
		if i%3 == 1 {
			id := fmt.Sprintf("toolu_%d", i)
			msgs = append(msgs,
				map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": id,
					"name": "get_weather", "input": map[string]any{"city": "Paris"}}}},
				map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result",
					"tool_use_id": id, "content": "sunny " + text}}})
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": "reply " + text}}})
	}
	msgs = append(msgs, map[string]any{"role": "user", "content": "and now?"})
	b, _ := json.Marshal(map[string]any{"model": model, "system": "You are a careful assistant.", "max_tokens": 256,
		"messages": msgs, "stream": stream, "tools": weatherTools(true)})
	return b
}

func weatherTools(anthropic bool) []any {
	schema := map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}
	if anthropic {
		return []any{map[string]any{"name": "get_weather", "description": "Weather in a city", "input_schema": schema}}
	}
	return []any{map[string]any{"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": schema}}
}

var dialectRoutes = []struct {
	name string
	path string
	body func(model string, turns, size int, stream bool) []byte
}{
	{"responses", "/v1/responses", responsesBody},
	{"messages", "/v1/messages", messagesBody},
}

// ollamaOrphans lists the tool messages of an /api/chat body without
// their call, and the calls without their result.
func ollamaOrphans(t *testing.T, body []byte) []string {
	t.Helper()
	var orphans []string
	msgs := forwardedMessages(t, body)
	for i, m := range msgs {
		calls, _ := m["tool_calls"].([]any)
		answered := map[string]bool{}
		for j := i + 1; j < len(msgs) && msgs[j]["role"] == "tool"; j++ {
			answered[fmt.Sprint(msgs[j]["tool_call_id"])] = true
		}
		for _, c := range calls {
			if id := fmt.Sprint(c.(map[string]any)["id"]); !answered[id] {
				orphans = append(orphans, "call "+id)
			}
		}
		if m["role"] == "tool" {
			j := i - 1
			for j >= 0 && msgs[j]["role"] == "tool" {
				j--
			}
			found := false
			if j >= 0 {
				for _, c := range msgs[j]["tool_calls"].([]any) {
					found = found || fmt.Sprint(c.(map[string]any)["id"]) == fmt.Sprint(m["tool_call_id"])
				}
			}
			if !found {
				orphans = append(orphans, fmt.Sprint("result ", m["tool_call_id"]))
			}
		}
	}
	return orphans
}

// TestDialectsToOllama: both routes, whole and streamed, are carried to
// /api/chat with num_ctx and truncate:false, trimmed with their tool units
// whole, answered in their own shape with the X-Ctxproxy-* headers, and
// recorded in the session.
func TestDialectsToOllama(t *testing.T) {
	for _, rt := range dialectRoutes {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", rt.name, stream), func(t *testing.T) {
				be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "It is sunny."})
				off := false
				sys := newSystem(t, be.URL, setup{gpu: gpu.Config{AutoSize: &off, TargetSize: 8192}})
				session := "dialect-" + rt.name
				resp := post(t, sys.url+rt.path, rt.body("llama3.1:8b", 300, 120, stream), map[string]string{"X-Session-ID": session})
				reply := readAll(t, resp.Body)
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, reply)
				}
				got, ok := be.Last("/api/chat")
				if !ok {
					t.Fatalf("the backend got no /api/chat request: %v", be.Requests())
				}
				var fwd struct {
					Options  map[string]any `json:"options"`
					Truncate *bool          `json:"truncate"`
					Messages []any          `json:"messages"`
				}
				if err := json.Unmarshal(got.Body, &fwd); err != nil {
					t.Fatal(err)
				}
				if fwd.Options["num_ctx"] != float64(8192) || fwd.Truncate == nil || *fwd.Truncate {
					t.Errorf("num_ctx %v, truncate %v", fwd.Options["num_ctx"], fwd.Truncate)
				}
				if o := ollamaOrphans(t, got.Body); len(o) > 0 {
					t.Errorf("orphans in the forwarded conversation: %v", o)
				}
				msgs := forwardedMessages(t, got.Body)
				if msgs[0]["role"] != "system" || msgs[len(msgs)-1]["content"] != "and now?" || len(msgs) > 400 {
					t.Errorf("forwarded %d messages, first %v, last %v", len(msgs), msgs[0], msgs[len(msgs)-1])
				}
				for _, h := range []string{"X-Ctxproxy-Session", "X-Ctxproxy-Tokens", "X-Ctxproxy-Limit", "X-Ctxproxy-Num-Ctx"} {
					if resp.Header.Get(h) == "" {
						t.Errorf("no %s header", h)
					}
				}
				if header(resp, "X-Ctxproxy-Dropped") == 0 || !strings.Contains(resp.Header.Get("X-Ctxproxy-Notice"), "trimmed") {
					t.Errorf("not trimmed: dropped %s notice %q", resp.Header.Get("X-Ctxproxy-Dropped"), resp.Header.Get("X-Ctxproxy-Notice"))
				}
				if header(resp, "X-Ctxproxy-Tokens") > header(resp, "X-Ctxproxy-Limit") {
					t.Errorf("tokens %d over limit %d", header(resp, "X-Ctxproxy-Tokens"), header(resp, "X-Ctxproxy-Limit"))
				}
				checkDialectReply(t, rt.name, stream, resp, reply, "It is sunny.")

				sys.flush(t)
				sess, err := sys.store.Get(context.Background(), session)
				if err != nil {
					t.Fatal(err)
				}
				last := sess.Messages[len(sess.Messages)-1]
				if last.Role != "assistant" || last.Content != "It is sunny." || last.Metadata["dialect"] != rt.name {
					t.Errorf("last stored message %+v", last)
				}
				if n := len(sess.Messages); n < 600 {
					t.Errorf("stored %d messages, want the whole conversation as sent", n)
				}
				if _, err := sessions.FromStored(sess.Messages); err != nil {
					t.Errorf("stored messages do not read back: %v", err)
				}
				if m := metricsText(t, sys.url); !strings.Contains(m, `dialect="`+rt.name+`"`) {
					t.Errorf("no metrics with dialect %q", rt.name)
				}
			})
		}
	}
}

// checkDialectReply checks a reply's shape: a response / message object,
// or the stream's events in order to their end.
func checkDialectReply(t *testing.T, dialect string, stream bool, resp *http.Response, reply, text string) {
	t.Helper()
	ct := resp.Header.Get("Content-Type")
	switch {
	case stream && !strings.HasPrefix(ct, "text/event-stream"):
		t.Errorf("content type %q", ct)
	case stream && dialect == "responses":
		for _, ev := range []string{"event: response.created", "event: response.output_text.delta", "event: response.completed"} {
			if !strings.Contains(reply, ev) {
				t.Errorf("no %q in the stream:\n%s", ev, reply)
			}
		}
	case stream:
		for _, ev := range []string{"event: message_start", "event: content_block_delta", "event: message_delta", "event: message_stop"} {
			if !strings.Contains(reply, ev) {
				t.Errorf("no %q in the stream:\n%s", ev, reply)
			}
		}
	case dialect == "responses":
		var r struct {
			Object string `json:"object"`
			Status string `json:"status"`
			Output []struct {
				Type    string `json:"type"`
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"output"`
		}
		if err := json.Unmarshal([]byte(reply), &r); err != nil || r.Object != "response" || r.Status != "completed" {
			t.Errorf("reply %s", reply)
		} else if text != "" && (len(r.Output) == 0 || len(r.Output[0].Content) == 0 || r.Output[0].Content[0].Text != text) {
			t.Errorf("reply text: %s", reply)
		}
	default:
		var m struct {
			Type    string `json:"type"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		if err := json.Unmarshal([]byte(reply), &m); err != nil || m.Type != "message" {
			t.Errorf("reply %s", reply)
		} else if text != "" && (len(m.Content) == 0 || m.Content[0].Text != text) {
			t.Errorf("reply text: %s", reply)
		}
	}
}

// TestDialectsToolCallReply: a tool call Ollama answers with comes back as
// a function_call item / tool_use block, and is recorded as the
// assistant's tool call.
func TestDialectsToolCallReply(t *testing.T) {
	for _, rt := range dialectRoutes {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", rt.name, stream), func(t *testing.T) {
				be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{ToolCalls: []fakebackend.ToolCall{
					{ID: "call_abc", Name: "get_weather", Arguments: map[string]any{"city": "Lyon"}}}})
				sys := newSystem(t, be.URL, setup{})
				resp := post(t, sys.url+rt.path, rt.body("llama3.1:8b", 3, 40, stream), map[string]string{"X-Session-ID": "tools-" + rt.name})
				reply := readAll(t, resp.Body)
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, reply)
				}
				want := `"type":"function_call"`
				if rt.name == "messages" {
					want = `"type":"tool_use"`
				}
				if !strings.Contains(reply, want) || !strings.Contains(reply, "call_abc") || !strings.Contains(reply, "Lyon") {
					t.Errorf("no tool call in the reply:\n%s", reply)
				}
				sys.flush(t)
				sess, err := sys.store.Get(context.Background(), "tools-"+rt.name)
				if err != nil {
					t.Fatal(err)
				}
				last := sess.Messages[len(sess.Messages)-1]
				if !strings.Contains(string(last.Raw), `"get_weather"`) || !strings.Contains(string(last.Raw), "Lyon") {
					t.Errorf("recorded reply %s", last.Raw)
				}
				msgs, err := sessions.FromStored(sess.Messages)
				if err != nil {
					t.Fatal(err)
				}
				// The replayed call and its result are stored as a unit.
				units := 0
				for i, m := range msgs {
					if len(m.ToolCalls) > 0 && i+1 < len(msgs) && msgs[i+1].Role == "tool" && msgs[i+1].ToolCallID == m.ToolCalls[0].ID {
						units++
					}
				}
				if units == 0 {
					t.Errorf("no call+result unit in the stored session: %+v", sess.Messages)
				}
			})
		}
	}
}

// TestDialectsOtherBackend: bound for a backend other than Ollama, both
// routes are forwarded in their own dialect to their own path; small
// ones byte for byte, long ones trimmed with their tool units whole.
func TestDialectsOtherBackend(t *testing.T) {
	for _, rt := range dialectRoutes {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", rt.name, stream), func(t *testing.T) {
				be := fakebackend.New(t, fakebackend.OpenAI, fakebackend.Options{Reply: "Fine."})
				sys := newSystem(t, be.URL, setup{cfg: Config{BackendKind: KindOpenAI}})
				small := rt.body("gpt-4o", 2, 40, stream)
				resp := post(t, sys.url+rt.path, small, map[string]string{"X-Session-ID": "other-" + rt.name})
				reply := readAll(t, resp.Body)
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, reply)
				}
				got, _ := be.Last(rt.path)
				if !bytes.Equal(got.Body, small) {
					t.Errorf("a small request was changed:\n%s\n%s", small, got.Body)
				}
				if resp.Header.Get("X-Ctxproxy-Tokens") == "" {
					t.Errorf("no X-Ctxproxy-Tokens")
				}
				sys.flush(t)
				sess, err := sys.store.Get(context.Background(), "other-"+rt.name)
				if err != nil {
					t.Fatal(err)
				}
				last := sess.Messages[len(sess.Messages)-1]
				if last.Role != "assistant" || last.Content != "Fine." || sess.Stats.PromptTokens == 0 {
					t.Errorf("recorded %+v, stats %+v", last, sess.Stats)
				}

				long := rt.body("gpt-4", 400, 200, stream)
				resp = post(t, sys.url+rt.path, long, nil)
				reply = readAll(t, resp.Body)
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, reply)
				}
				got, _ = be.Last(rt.path)
				if len(got.Body) >= len(long) || header(resp, "X-Ctxproxy-Dropped") == 0 {
					t.Fatalf("not trimmed: %d of %d bytes forwarded", len(got.Body), len(long))
				}
				if o := dialectOrphans(t, rt.name, got.Body); len(o) > 0 {
					t.Errorf("orphans: %v", o)
				}
			})
		}
	}
}

// dialectOrphans lists unpaired calls and results of a Responses input or
// a Messages conversation.
func dialectOrphans(t *testing.T, dialect string, body []byte) []string {
	t.Helper()
	var v struct {
		Input    []map[string]any `json:"input"`
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	calls, results := map[string]int{}, map[string]int{}
	if dialect == "responses" {
		for _, it := range v.Input {
			switch it["type"] {
			case "function_call":
				calls[fmt.Sprint(it["call_id"])]++
			case "function_call_output":
				results[fmt.Sprint(it["call_id"])]++
			}
		}
	} else {
		for i, m := range v.Messages {
			blocks, _ := m["content"].([]any)
			for _, b := range blocks {
				b := b.(map[string]any)
				switch b["type"] {
				case "tool_use":
					calls[fmt.Sprint(b["id"])] = i
				case "tool_result":
					if calls[fmt.Sprint(b["tool_use_id"])] == i-1 {
						results[fmt.Sprint(b["tool_use_id"])] = i
					}
				}
			}
		}
	}
	var out []string
	for id := range calls {
		if _, ok := results[id]; !ok {
			out = append(out, "call "+id)
		}
	}
	for id := range results {
		if _, ok := calls[id]; !ok {
			out = append(out, "result "+id)
		}
	}
	return out
}

// TestDialectsPassThroughGolden: what ctxproxy need not change reaches
// the backend as sent: unknown members, item fields and spacing, with
// only its own annotations taken out.
func TestDialectsPassThroughGolden(t *testing.T) {
	for _, tc := range []struct{ path, in, want string }{
		{"/v1/responses",
			`{"model":"gpt-4o", "x_unknown":{"a":[1,2]},"input":[{"role":"user","content":"hi","x_item":true}],"store":true}`,
			`{"model":"gpt-4o", "x_unknown":{"a":[1,2]},"input":[{"role":"user","content":"hi","x_item":true}],"store":true}`},
		{"/v1/responses",
			`{"model":"gpt-4o","input":"just a string","metadata":{"k":"v"}}`,
			`{"model":"gpt-4o","input":"just a string","metadata":{"k":"v"}}`},
		{"/v1/responses",
			`{"model":"gpt-4o","input":[{"role":"user","content":"pinned","_preserve":true},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"}],"x":1}`,
			`{"model":"gpt-4o","input":[{"role":"user","content":"pinned"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"}],"x":1}`},
		{"/v1/messages",
			`{"model":"claude-x","max_tokens":64,"system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi","x_block":1}]}],"x_top":null}`,
			`{"model":"claude-x","max_tokens":64,"system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi","x_block":1}]}],"x_top":null}`},
		{"/v1/messages",
			`{"model":"claude-x","max_tokens":64,"messages":[{"role":"user","content":"a","_importance":0.9},{"role":"assistant","content":"b"}, {"role":"user","content":"c"}]}`,
			`{"model":"claude-x","max_tokens":64,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}`},
	} {
		be := fakebackend.New(t, fakebackend.OpenAI, fakebackend.Options{})
		sys := newSystem(t, be.URL, setup{cfg: Config{BackendKind: KindOpenAI}})
		resp := post(t, sys.url+tc.path, []byte(tc.in), map[string]string{"X-Ctxproxy-Strategy": "smart"})
		reply := readAll(t, resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", tc.in, resp.StatusCode, reply)
		}
		got, _ := be.Last(tc.path)
		if string(got.Body) != tc.want {
			t.Errorf("forwarded\n%s\nwant\n%s", got.Body, tc.want)
		}
		if got.Header.Get("X-Ctxproxy-Strategy") != "" {
			t.Errorf("ctxproxy's header reached the backend")
		}
	}
}

// TestDialectsServerState: previous_response_id (and conversation,
// item_reference) bound for Ollama is a clear 400 in OpenAI's shape, and
// Ollama is not asked; bound for another backend it is forwarded as sent,
// not trimmed, and the session appends the turn.
func TestDialectsServerState(t *testing.T) {
	bodies := []string{
		`{"model":"llama3.1:8b","previous_response_id":"resp_1","input":"and then?"}`,
		`{"model":"llama3.1:8b","conversation":"conv_1","input":[{"role":"user","content":"and then?"}]}`,
		`{"model":"llama3.1:8b","input":[{"type":"item_reference","id":"msg_1"},{"role":"user","content":"and then?"}]}`,
	}
	t.Run("ollama", func(t *testing.T) {
		be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
		sys := newSystem(t, be.URL, setup{})
		for _, body := range bodies {
			resp := post(t, sys.url+"/v1/responses", []byte(body), nil)
			reply := readAll(t, resp.Body)
			var e struct {
				Error struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if resp.StatusCode != 400 || json.Unmarshal([]byte(reply), &e) != nil || e.Error.Message == "" {
				t.Errorf("%s: status %d: %s", body, resp.StatusCode, reply)
			}
		}
		for _, r := range be.Requests() {
			if r.Path == "/api/chat" || r.Path == "/v1/responses" {
				t.Errorf("Ollama was asked: %s %s", r.Path, r.Body)
			}
		}
	})
	t.Run("other", func(t *testing.T) {
		be := fakebackend.New(t, fakebackend.OpenAI, fakebackend.Options{Reply: "Then this."})
		sys := newSystem(t, be.URL, setup{cfg: Config{BackendKind: KindOpenAI}})
		long := strings.Replace(string(responsesBody("gpt-4", 400, 200, false)), `"model":"gpt-4"`,
			`"model":"gpt-4","previous_response_id":"resp_1"`, 1)
		for _, body := range append(bodies, long) {
			resp := post(t, sys.url+"/v1/responses", []byte(body), map[string]string{"X-Session-ID": "prev"})
			reply := readAll(t, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, reply)
			}
			got, _ := be.Last("/v1/responses")
			if string(got.Body) != body {
				t.Errorf("changed: %.200s", got.Body)
			}
			if !strings.Contains(resp.Header.Get("X-Ctxproxy-Notice"), "Not counted or trimmed") {
				t.Errorf("notice %q", resp.Header.Get("X-Ctxproxy-Notice"))
			}
		}
		sys.flush(t)
		sess, err := sys.store.Get(context.Background(), "prev")
		if err != nil {
			t.Fatal(err)
		}
		// Each of the three short turns is appended with its reply (the
		// long one brings hundreds of messages of its own).
		asked, answered := 0, 0
		for _, m := range sess.Messages {
			switch {
			case m.Role == "user" && m.Content == "and then?":
				asked++
			case m.Role == "assistant" && m.Content == "Then this.":
				answered++
			}
		}
		if asked != 3 || answered != 4 {
			t.Errorf("the session holds %d of the 3 short turns and %d of the 4 replies", asked, answered)
		}
	})
}

// TestDialectsMalformed: bodies ctxproxy cannot read are forwarded
// unchanged; translation failures and dangerous input get a clear 4xx in
// the route's error shape; nothing panics.
func TestDialectsMalformed(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{cfg: Config{MaxDepth: 32}})
	for _, tc := range []struct {
		path, body string
		status     int
		forwarded  bool   // reached the backend unchanged at path
		shape      string // "openai" or "anthropic" error
	}{
		// Forwarded as sent to Ollama's own route, which answers them (the
		// fake as Ollama: 400 for JSON it cannot parse).
		{"/v1/responses", `{"model":`, 400, true, ""},
		{"/v1/responses", `{"model":"m","input":42}`, 200, true, ""},
		{"/v1/responses", `[1,2]`, 400, true, ""},
		{"/v1/messages", `{"model":"m","messages":"nope","max_tokens":5}`, 200, true, ""},
		{"/v1/messages", `{"model":"m","messages":[{"content":"no role"}],"max_tokens":5}`, 200, true, ""},
		{"/v1/messages", `{"model":"llama3.1:8b","messages":[{"role":"user","content":"hi"}]}`, 400, false, "anthropic"},
		{"/v1/responses", `{"model":"llama3.1:8b","input":[{"type":"web_search_call","id":"x"}]}`, 400, false, "openai"},
		{"/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}]}`, 400, false, "anthropic"},
	} {
		n := len(be.Requests())
		resp := post(t, sys.url+tc.path, []byte(tc.body), nil)
		reply := readAll(t, resp.Body)
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: status %d: %s", tc.path, tc.body, resp.StatusCode, reply)
			continue
		}
		var reqs []fakebackend.Request // the route's, not the backend's detection
		for _, r := range be.Requests()[n:] {
			if r.Path != "/api/version" && r.Path != "/" {
				reqs = append(reqs, r)
			}
		}
		if tc.forwarded != (len(reqs) == 1 && reqs[0].Path == tc.path && string(reqs[0].Body) == tc.body) {
			t.Errorf("%s: forwarded %v: %+v", tc.body, tc.forwarded, reqs)
		}
		switch tc.shape {
		case "anthropic":
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal([]byte(reply), &e) != nil || e.Type != "error" || e.Error.Type == "" || e.Error.Message == "" {
				t.Errorf("%s: not Anthropic's error shape: %s", tc.body, reply)
			}
		case "openai":
			var e struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal([]byte(reply), &e) != nil || e.Error.Message == "" {
				t.Errorf("%s: not OpenAI's error shape: %s", tc.body, reply)
			}
		}
	}
}

// TestDialectsBackendError: Ollama's error answer reaches the client in
// the route's error shape.
func TestDialectsBackendError(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Status: 404, ErrorMessage: `model "nope" not found, try pulling it first`})
	sys := newSystem(t, be.URL, setup{})
	resp := post(t, sys.url+"/v1/messages", messagesBody("nope", 1, 20, true), nil)
	reply := readAll(t, resp.Body)
	if resp.StatusCode != 404 || !strings.Contains(reply, `"type":"error"`) || !strings.Contains(reply, "not found") {
		t.Errorf("messages: %d %s", resp.StatusCode, reply)
	}
	resp = post(t, sys.url+"/v1/responses", responsesBody("nope", 1, 20, false), nil)
	reply = readAll(t, resp.Body)
	if resp.StatusCode != 404 || !strings.Contains(reply, `"error":{`) || !strings.Contains(reply, "not found") {
		t.Errorf("responses: %d %s", resp.StatusCode, reply)
	}
}

// TestDialectsInband: an in-band command is answered in the route's own
// shape, streamed or not, without asking the backend.
func TestDialectsInband(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{cfg: Config{Planning: plan.Config{Inband: true}}})
	for _, tc := range []struct{ path, body, dialect string }{
		{"/v1/responses", `{"model":"llama3.1:8b","input":"/context help"}`, "responses"},
		{"/v1/responses", `{"model":"llama3.1:8b","input":"/context help","stream":true}`, "responses"},
		{"/v1/messages", `{"model":"llama3.1:8b","max_tokens":9,"messages":[{"role":"user","content":"/context help"}]}`, "messages"},
		{"/v1/messages", `{"model":"llama3.1:8b","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"/context help"}]}`, "messages"},
	} {
		resp := post(t, sys.url+tc.path, []byte(tc.body), map[string]string{"X-Session-ID": "inband"})
		reply := readAll(t, resp.Body)
		stream := strings.Contains(tc.body, `"stream":true`)
		if resp.StatusCode != 200 || !strings.Contains(reply, "ctxproxy answers these commands") {
			t.Errorf("%s: %d %s", tc.body, resp.StatusCode, reply)
		}
		checkDialectReply(t, tc.dialect, stream, resp, reply, "")
	}
	for _, r := range be.Requests() {
		if r.Path == "/api/chat" {
			t.Errorf("the backend was asked")
		}
	}
}

// TestDialectsExactCount: with the model's tokenizer known, the count of a
// translated request is exact: it equals the fake Ollama's
// prompt_eval_count of the /api/chat body it gets.
func TestDialectsExactCount(t *testing.T) {
	model, pre := bpeModel()
	for _, rt := range dialectRoutes {
		t.Run(rt.name, func(t *testing.T) {
			be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Model: model, Pretokenizer: pre})
			sys := newSystem(t, be.URL, setup{})
			resp := post(t, sys.url+rt.path, rt.body("tiny", 6, 80, false), nil)
			reply := readAll(t, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, reply)
			}
			var usage struct {
				Usage map[string]int `json:"usage"`
			}
			_ = json.Unmarshal([]byte(reply), &usage)
			want := usage.Usage["input_tokens"]
			if n := header(resp, "X-Ctxproxy-Tokens"); n != want || want == 0 {
				t.Errorf("X-Ctxproxy-Tokens %d, the model's count (usage.input_tokens) %d", n, want)
			}
		})
	}
}

// withMember returns the JSON object body with key set to v.
func withMember(t *testing.T, body []byte, key string, v any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	m[key] = v
	out, _ := json.Marshal(m)
	return out
}

// TestDialectsOverflowRetry: when Ollama refuses a translated prompt as
// longer than num_ctx, ctxproxy cuts harder and resends it, streamed or
// not, before the client sees a byte; when Ollama refuses every prompt,
// the client gets context_length_exceeded in the route's error shape.
func TestDialectsOverflowRetry(t *testing.T) {
	for _, rt := range dialectRoutes {
		for _, stream := range []bool{false, true} {
			be, sys := undercounting(t)
			body := withMember(t, rt.body("m", 40, 60, stream), "options", map[string]any{"num_ctx": 2048})
			resp := post(t, sys.url+rt.path, body, nil)
			got := readAll(t, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("%s stream %v: status %d: %s", rt.name, stream, resp.StatusCode, got)
			}
			checkDialectReply(t, rt.name, stream, resp, got, "")
			if w := strings.Join(resp.Header.Values("X-Ctxproxy-Warning"), " | "); !strings.Contains(w, "retried") {
				t.Errorf("%s: no word of the retry: %q", rt.name, w)
			}
			if n := requestsTo(be, "/api/chat"); n < 2 {
				t.Errorf("%s: the backend saw %d chat requests; want the refused one and a retry", rt.name, n)
			}
		}
	}
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Status: 400, ErrorMessage: "the input length exceeds the context length"})
	sys := newSystem(t, be.URL, setup{gpu: gpuOff()})
	for _, rt := range dialectRoutes {
		resp := post(t, sys.url+rt.path, rt.body("m", 10, 40, false), nil)
		got := readAll(t, resp.Body)
		want := `"code":"context_length_exceeded"`
		if rt.name == "messages" {
			want = `"type":"error","error":{"type":"invalid_request_error"`
		}
		if resp.StatusCode != 400 || !strings.Contains(got, want) || !strings.Contains(got, "refused the prompt") {
			t.Errorf("%s: %d %s", rt.name, resp.StatusCode, got)
		}
	}
}

// TestDialectsCutBodies: every prefix of a valid request, and a few
// shapes of the wrong type, gets an answer (forwarded, or a clear 4xx),
// never a dropped connection or a 5xx of ctxproxy's own.
func TestDialectsCutBodies(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{cfg: Config{Planning: plan.Config{Inband: true}}})
	for _, rt := range dialectRoutes {
		full := rt.body("llama3.1:8b", 2, 20, false)
		bodies := [][]byte{[]byte(`{}`), []byte(`null`), []byte(`""`),
			[]byte(`{"model":"llama3.1:8b","input":[null],"messages":[null],"max_tokens":1}`),
			[]byte(`{"model":"llama3.1:8b","input":[{}],"messages":[{"role":"user","content":[{"type":"tool_result"}]}],"max_tokens":1}`),
			[]byte(`{"model":"llama3.1:8b","input":[{"type":"function_call_output"}],"messages":[{"role":"assistant","content":[{"type":"tool_use"}]}],"max_tokens":1}`),
			[]byte(`{"model":"llama3.1:8b","instructions":["x"],"system":{"a":1},"input":"/context","messages":[{"role":"user","content":"/context"}],"max_tokens":1}`)}
		for i := 1; i < len(full); i += 29 {
			bodies = append(bodies, full[:i])
		}
		for _, body := range bodies {
			req, _ := http.NewRequest(http.MethodPost, sys.url+rt.path, bytes.NewReader(body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s %q: %v", rt.path, body, err)
			}
			reply := readAll(t, resp.Body)
			if resp.StatusCode >= 500 {
				t.Errorf("%s %q: %d %s", rt.path, body, resp.StatusCode, reply)
			}
		}
	}
}
