package translate

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
	"github.com/google/go-cmp/cmp"
)

// TestRequestRejects checks that input Request cannot translate gets a typed
// 400 naming the field, never a panic or a half-translated body.
func TestRequestRejects(t *testing.T) {
	const user = `{"role":"user","content":"hi"}`
	withMsg := func(m string) string { return `{"model":"m","messages":[` + m + `]}` }
	with := func(extra string) string { return `{"model":"m","messages":[` + user + `],` + extra + `}` }
	cases := []struct {
		name, body  string
		param, code string
	}{
		{"empty body", ``, "", ""},
		{"malformed JSON", `{"model":"m",`, "", ""},
		{"trailing garbage", withMsg(user) + `x`, "", ""},
		{"body is an array", `[]`, "", codeInvalidType},
		{"model missing", `{"messages":[` + user + `]}`, "model", codeMissing},
		{"model a number", `{"model":1,"messages":[` + user + `]}`, "model", codeInvalidType},
		{"model empty", `{"model":"","messages":[` + user + `]}`, "model", codeInvalidType},
		{"messages missing", `{"model":"m"}`, "messages", codeMissing},
		{"messages not an array", `{"model":"m","messages":{"role":"user"}}`, "messages", codeInvalidType},
		{"messages empty", `{"model":"m","messages":[]}`, "messages", codeInvalidValue},
		{"message not an object", withMsg(`"hi"`), "messages[0]", codeInvalidType},
		{"role a number", withMsg(`{"role":1,"content":"hi"}`), "messages[0].role", codeInvalidType},
		{"content a number", withMsg(`{"role":"user","content":42}`), "messages[0].content", codeInvalidType},
		{"content an object", withMsg(`{"role":"user","content":{"text":"hi"}}`), "messages[0].content", codeInvalidType},
		{"user content null", withMsg(`{"role":"user","content":null}`), "messages[0].content", codeMissing},
		{"part not an object", withMsg(`{"role":"user","content":["hi"]}`), "messages[0].content[0]", codeInvalidType},
		{"part without type", withMsg(`{"role":"user","content":[{"text":"hi"}]}`), "messages[0].content[0].type", codeMissing},
		{"part unknown type", withMsg(`{"role":"user","content":[{"type":"video","video":"x"}]}`), "messages[0].content[0].type", codeInvalidValue},
		{"part audio", withMsg(`{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}`), "messages[0].content[0].input_audio.data", codeInvalidValue},
		{"part file", withMsg(`{"role":"user","content":[{"type":"file","file":{"file_id":"f"}}]}`), "messages[0].content[0].type", codeUnsupportedValue},
		{"part text a number", withMsg(`{"role":"user","content":[{"type":"text","text":1}]}`), "messages[0].content[0].text", codeInvalidType},
		{"http image", withMsg(`{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/a.png"}}]}`), "messages[0].content[0].image_url.url", codeUnsupportedValue},
		{"https image", withMsg(`{"role":"user","content":[{"type":"image_url","image_url":"https://x/a.png"}]}`), "messages[0].content[0].image_url", codeUnsupportedValue},
		{"image not a data URL", withMsg(`{"role":"user","content":[{"type":"image_url","image_url":{"url":"file:///etc/passwd"}}]}`), "messages[0].content[0].image_url.url", codeInvalidValue},
		{"image data URL not base64", withMsg(`{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png,abc"}}]}`), "messages[0].content[0].image_url.url", codeInvalidValue},
		{"image not an image type", withMsg(`{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:text/plain;base64,aGk="}}]}`), "messages[0].content[0].image_url.url", codeInvalidValue},
		{"image bad base64", withMsg(`{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,a$c="}}]}`), "messages[0].content[0].image_url.url", codeInvalidValue},
		{"image short base64", withMsg(`{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,abc"}}]}`), "messages[0].content[0].image_url.url", codeInvalidValue},
		{"image data after padding", withMsg(`{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,ab==cd=="}}]}`), "messages[0].content[0].image_url.url", codeInvalidValue},
		{"image empty", withMsg(`{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,"}}]}`), "messages[0].content[0].image_url.url", codeInvalidValue},
		{"image url missing", withMsg(`{"role":"user","content":[{"type":"image_url","image_url":{}}]}`), "messages[0].content[0].image_url.url", codeInvalidType},
		{"tool_calls not an array", withMsg(`{"role":"assistant","tool_calls":{}}`), "messages[0].tool_calls", codeInvalidType},
		{"tool call not an object", withMsg(`{"role":"assistant","tool_calls":[1]}`), "messages[0].tool_calls[0]", codeInvalidType},
		{"tool call custom type", withMsg(`{"role":"assistant","tool_calls":[{"id":"a","type":"custom","custom":{}}]}`), "messages[0].tool_calls[0].function", codeInvalidType},
		{"tool call without function", withMsg(`{"role":"assistant","tool_calls":[{"id":"a","type":"function"}]}`), "messages[0].tool_calls[0].function", codeInvalidType},
		{"tool call arguments not JSON", withMsg(`{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{city: Paris"}}]}`), "messages[0].tool_calls[0].function.arguments", codeInvalidValue},
		{"tool call arguments an array", withMsg(`{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"[1]"}}]}`), "messages[0].tool_calls[0].function.arguments", codeInvalidValue},
		{"tool call arguments a number", withMsg(`{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":3}}]}`), "messages[0].tool_calls[0].function.arguments", codeInvalidValue},
		{"tool call id a number", withMsg(`{"role":"assistant","tool_calls":[{"id":7,"function":{"name":"f","arguments":"{}"}}]}`), "messages[0].tool_calls[0].id", codeInvalidType},
		{"name a number", withMsg(`{"role":"user","content":"x","name":5}`), "messages[0].name", codeInvalidType},
		{"tool_call_id a number", withMsg(`{"role":"tool","content":"x","tool_call_id":5}`), "messages[0].tool_call_id", codeInvalidType},
		{"stream a string", with(`"stream":"yes"`), "stream", codeInvalidType},
		{"stream_options not an object", with(`"stream":true,"stream_options":true`), "stream_options", codeInvalidType},
		{"include_usage a string", with(`"stream":true,"stream_options":{"include_usage":"yes"}`), "stream_options.include_usage", codeInvalidType},
		{"temperature a string", with(`"temperature":"0.7"`), "temperature", codeInvalidType},
		{"top_p a bool", with(`"top_p":true`), "top_p", codeInvalidType},
		{"max_tokens a float", with(`"max_tokens":10.5`), "max_tokens", codeInvalidType},
		{"seed a float", with(`"seed":1e3`), "seed", codeInvalidType},
		{"tools not an array", with(`"tools":{}`), "tools", codeInvalidType},
		{"tool not an object", with(`"tools":[1]`), "tools[0]", codeInvalidType},
		{"response_format a string", with(`"response_format":"json"`), "response_format", codeInvalidType},
		{"json_schema schema a string", with(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":"{}"}}`), "response_format.json_schema.schema", codeInvalidType},
		{"reasoning_effort unknown", with(`"reasoning_effort":"turbo"`), "reasoning_effort", codeInvalidValue},
		{"reasoning not an object", with(`"reasoning":"high"`), "reasoning", codeInvalidType},
		{"reasoning.effort unknown", with(`"reasoning":{"effort":1}`), "reasoning.effort", codeInvalidValue},
		{"message reasoning a number", withMsg(`{"role":"assistant","content":"x","reasoning":5}`), "messages[0].reasoning", codeInvalidType},
		{"logprobs a string", with(`"logprobs":"yes"`), "logprobs", codeInvalidType},
		{"top_logprobs a float", with(`"top_logprobs":1.5`), "top_logprobs", codeInvalidType},
		{"deep nesting", with(`"metadata":` + strings.Repeat("[", jsonscan.MaxDepth+1) + strings.Repeat("]", jsonscan.MaxDepth+1)), "", ""},
		{"control character in a string", withMsg(`{"role":"user","content":"a` + "\x01" + `b"}`), "", ""},
		{"bad escape", withMsg(`{"role":"user","content":"a\qb"}`), "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body, _, err := Request([]byte(tc.body), RequestOptions{NumCtx: 2048})
			if body != nil {
				t.Errorf("got a body for bad input: %s", body)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if e.Status != http.StatusBadRequest || e.Type != "invalid_request_error" || e.Message == "" {
				t.Errorf("error = %+v, want a 400 invalid_request_error with a message", e)
			}
			if e.Param != tc.param || e.Code != tc.code {
				t.Errorf("param, code = %q, %q; want %q, %q (%s)", e.Param, e.Code, tc.param, tc.code, e.Message)
			}
			if !json.Valid(e.JSON()) {
				t.Errorf("error body is not JSON: %s", e.JSON())
			}
		})
	}
}

// TestRequestAccepts covers edge cases that must translate.
func TestRequestAccepts(t *testing.T) {
	cases := []struct {
		name, body string
		want       string // the Ollama body, compact
	}{
		{
			"nulls are absent",
			`{"model":"m","messages":[{"role":"user","content":"hi","name":null}],"temperature":null,"stop":null,"tools":null,"n":null}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,"options":{"temperature":1,"top_p":1}}`,
		},
		{
			"white space everywhere",
			" {\n \"model\" : \"m\" ,\r\n\t\"messages\" : [ { \"role\" : \"user\" , \"content\" : \"hi\" } ] , \"stop\" : [ \"a\" , \"b\" ] } \n",
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,"options":{"temperature":1,"top_p":1,"stop":[ "a" , "b" ]}}`,
		},
		{
			"escaped keys",
			`{"mod\u0065l":"m","messages":[{"r\u006fle":"user","content":"hi"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,"options":{"temperature":1,"top_p":1}}`,
		},
		{
			"duplicate keys: the last wins, as in encoding/json",
			`{"model":"a","model":"b","messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"b","messages":[{"role":"user","content":"hi"}],"stream":false,"options":{"temperature":1,"top_p":1}}`,
		},
		{
			"assistant with only tool calls and a tool result without id",
			`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":"  "}}]},{"role":"tool","content":"r"}]}`,
			`{"model":"m","messages":[{"role":"assistant","content":"","tool_calls":[{"id":"c","function":{"index":0,"name":"f","arguments":{}}}]},{"role":"tool","content":"r"}],"stream":false,"options":{"temperature":1,"top_p":1}}`,
		},
		{
			"empty tool_calls array",
			`{"model":"m","messages":[{"role":"assistant","content":"x","tool_calls":[]}]}`,
			`{"model":"m","messages":[{"role":"assistant","content":"x"}],"stream":false,"options":{"temperature":1,"top_p":1}}`,
		},
		{
			"empty tools array",
			`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":false,"options":{"temperature":1,"top_p":1}}`,
		},
		{
			"tool_choice none without tools",
			`{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"none"}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":false,"options":{"temperature":1,"top_p":1}}`,
		},
		{
			"max_tokens -1 and client options with num_ctx kept when the sizer is off",
			`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-1,"options":{"num_ctx":4096,"num_predict":5}}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":false,"options":{"num_predict":-1,"temperature":1,"top_p":1,"num_ctx":4096}}`,
		},
		{
			"image with line breaks in the base64",
			`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,aGVs\r\nbG8h"}}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":"","images":["aGVs\r\nbG8h"]}],"stream":false,"options":{"temperature":1,"top_p":1}}`,
		},
		{
			"tool name found from the latest call with that id",
			`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"old","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"1"},{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"new","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"2"}]}`,
			`{"model":"m","messages":[{"role":"assistant","content":"","tool_calls":[{"id":"c","function":{"index":0,"name":"old","arguments":{}}}]},{"role":"tool","content":"1","tool_name":"old","tool_call_id":"c"},{"role":"assistant","content":"","tool_calls":[{"id":"c","function":{"index":0,"name":"new","arguments":{}}}]},{"role":"tool","content":"2","tool_name":"new","tool_call_id":"c"}],"stream":false,"options":{"temperature":1,"top_p":1}}`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body, _, err := Request([]byte(tc.body), RequestOptions{})
			if err != nil {
				t.Fatalf("Request: %v", err)
			}
			if diff := cmp.Diff(tc.want, string(body)); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzRequest checks that Request never panics and that whatever it
// accepts is valid JSON that Ollama's request shape decodes.
func FuzzRequest(f *testing.F) {
	for _, tc := range requestCases {
		file := tc.file
		if file == "" {
			file = tc.name
		}
		if b, err := os.ReadFile(filepath.Join("testdata", "request", file+".json")); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b\n"}]}]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"tool","content":"x","tool_call_id":"q"}],"tool_choice":{"type":"function","function":{"name":"f"}},"tools":[{"type":"function","function":{"name":"f"}}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		body, _, err := Request(in, RequestOptions{NumCtx: 4096})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
				t.Fatalf("err = %v, want a 400 *Error", err)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("invalid output for %q:\n%s", in, body)
		}
		var shape struct {
			Model    string `json:"model"`
			Messages []struct {
				Role    string   `json:"role"`
				Content string   `json:"content"`
				Images  [][]byte `json:"images"`
			} `json:"messages"`
			Stream  *bool          `json:"stream"`
			Options map[string]any `json:"options"`
		}
		if err := json.Unmarshal(body, &shape); err != nil {
			t.Fatalf("output does not decode: %v\n%s", err, body)
		}
		if shape.Stream == nil || len(shape.Messages) == 0 || shape.Model == "" {
			t.Fatalf("output lacks model, messages or stream:\n%s", body)
		}
	})
}

// TestRequestLeavesOutWhatOllamaIgnores: what Ollama's own /v1 ignores
// (or carries as it is) is translated, never a 400 of ctxproxy's own;
// what cannot be carried is listed in Dropped.
func TestRequestLeavesOutWhatOllamaIgnores(t *testing.T) {
	const user = `{"role":"user","content":"hi"}`
	withMsg := func(m string) string { return `{"model":"m","messages":[` + m + `]}` }
	with := func(extra string) string { return `{"model":"m","messages":[` + user + `],` + extra + `}` }
	cases := []struct {
		name, body string
		dropped    string // a Dropped field, "" for none expected
	}{
		{"role missing", withMsg(`{"content":"hi"}`), ""},
		{"unknown role", withMsg(`{"role":"narrator","content":"hi"}`), ""},
		{"function role", withMsg(`{"role":"function","name":"f","content":"hi"}`), "messages[0].name"},
		{"tool_calls on a user", withMsg(`{"role":"user","content":"x","tool_calls":[]}`), ""},
		{"tool call without name", withMsg(`{"role":"assistant","tool_calls":[{"id":"a","function":{"arguments":"{}"}}]}`), ""},
		{"legacy function_call message", withMsg(`{"role":"assistant","function_call":{"name":"f","arguments":"{}"}}`), "messages[0].function_call"},
		{"reasoning a number", withMsg(`{"role":"assistant","content":"x","reasoning_content":5}`), "messages[0].reasoning_content"},
		{"n is 2", with(`"n":2`), "n"},
		{"n is 0", with(`"n":0`), "n"},
		{"n a string", with(`"n":"1"`), "n"},
		{"legacy functions", with(`"functions":[{"name":"f"}]`), "functions"},
		{"legacy function_call", with(`"function_call":"auto"`), "function_call"},
		{"audio output", with(`"modalities":["text","audio"]`), "modalities"},
		{"modalities not an array", with(`"modalities":"text"`), "modalities"},
		{"max_completion_tokens a string", with(`"max_completion_tokens":"10"`), "max_completion_tokens"},
		{"stop a number", with(`"stop":5`), "stop"},
		{"stop array with a number", with(`"stop":["a",5]`), "stop"},
		{"tool custom type", with(`"tools":[{"type":"web_search"}]`), "tools[0]"},
		{"tool without function", with(`"tools":[{"type":"function"}]`), ""},
		{"tool without name", with(`"tools":[{"type":"function","function":{"parameters":{}}}]`), ""},
		{"tool_choice unknown string", with(`"tool_choice":"always"`), "tool_choice"},
		{"tool_choice a number", with(`"tool_choice":1`), "tool_choice"},
		{"tool_choice unknown type", with(`"tool_choice":{"type":"custom"}`), "tool_choice"},
		{"tool_choice without name", with(`"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{}}`), "tool_choice"},
		{"tool_choice names a missing tool", with(`"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}`), "tool_choice"},
		{"tool_choice required without tools", with(`"tool_choice":"required"`), "tool_choice"},
		{"allowed_tools not an object", with(`"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"allowed_tools","allowed_tools":[]}`), "tool_choice"},
		{"allowed_tools without tools", with(`"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto"}}`), "tool_choice"},
		{"response_format without type", with(`"response_format":{}`), "response_format.type"},
		{"response_format unknown type", with(`"response_format":{"type":"yaml"}`), "response_format.type"},
		{"think unknown", with(`"think":"maximal"`), "think"},
		{"keep_alive a bool", with(`"keep_alive":true`), "keep_alive"},
		{"options an array", with(`"options":[]`), "options"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body, info, err := Request([]byte(tc.body), RequestOptions{NumCtx: 2048})
			if err != nil {
				t.Fatalf("err = %v, want a translation", err)
			}
			var req ollamaRequest
			if err := json.Unmarshal(body, &req); err != nil {
				t.Fatalf("not an /api/chat request: %v\n%s", err, body)
			}
			if tc.dropped == "" {
				return
			}
			for _, d := range info.Dropped {
				if d.Field == tc.dropped {
					return
				}
			}
			t.Errorf("Dropped = %+v, want %q listed", info.Dropped, tc.dropped)
		})
	}
}
