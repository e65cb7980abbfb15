package wire

import (
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tapThrough reads body through a tap in pieces of n bytes, so event
// boundaries fall mid-line.
func tapThrough(t *testing.T, body, contentType string, d Dialect, n int) (string, Reply) {
	t.Helper()
	tp := NewTap(io.NopCloser(strings.NewReader(body)), d, 200, contentType, 0)
	var sb strings.Builder
	buf := make([]byte, n)
	for {
		k, err := tp.Read(buf)
		sb.WriteString(string(buf[:k]))
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	tp.Close()
	got := tp.Reply()
	if again := tp.Reply(); !cmp.Equal(again, got) {
		t.Errorf("a second Reply differs from the first:\n%s", cmp.Diff(got, again))
	}
	return sb.String(), got
}

func TestTap(t *testing.T) {
	cases := []struct {
		name, ctype, body string
		d                 Dialect
		want              Reply
	}{
		{
			name:  "ollama stream",
			ctype: "application/x-ndjson",
			d:     Ollama,
			body: `{"model":"m","message":{"role":"assistant","content":"Hel"},"done":false}
{"model":"m","message":{"role":"assistant","content":"lo"},"done":false}
{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":42,"eval_count":2}
`,
			want: Reply{Status: 200, Complete: true, PromptTokens: 42, CachedTokens: -1, OutputTokens: 2, Content: "Hello", FinishReason: "stop"},
		},
		{
			name:  "ollama 0.30 and later: the cached prompt",
			ctype: "application/x-ndjson",
			d:     Ollama,
			body: `{"model":"m","message":{"role":"assistant","content":"Hi"},"done":true,"done_reason":"stop","prompt_eval_count":42,"prompt_eval_cached_count":40,"eval_count":1}
`,
			want: Reply{Status: 200, Complete: true, PromptTokens: 42, CachedTokens: 40, OutputTokens: 1, Content: "Hi", FinishReason: "stop"},
		},
		{
			name:  "ollama stream cut off",
			ctype: "application/x-ndjson",
			d:     Ollama,
			body:  `{"model":"m","message":{"role":"assistant","content":"Hel"},"done":false}` + "\n",
			want:  Reply{Status: 200, PromptTokens: -1, CachedTokens: -1, Content: "Hel"},
		},
		{
			name:  "ollama tool calls and thinking",
			ctype: "application/json; charset=utf-8",
			d:     Ollama,
			body:  `{"model":"m","message":{"role":"assistant","content":"","thinking":"hmm","tool_calls":[{"function":{"index":0,"name":"f","arguments":{"a":1}}}]},"done":true,"done_reason":"stop","prompt_eval_count":7,"eval_count":3}`,
			want: Reply{Status: 200, Complete: true, PromptTokens: 7, CachedTokens: -1, OutputTokens: 3, Thinking: "hmm", FinishReason: "stop",
				ToolCalls: []ReplyCall{{Name: "f", Arguments: `{"a":1}`}}},
		},
		{
			// Ollama before function.index: calls arrive in order, some
			// chunks carrying several.
			name:  "ollama tool calls without index across chunks",
			ctype: "application/x-ndjson",
			d:     Ollama,
			body: `{"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"a","arguments":{}}},{"function":{"name":"b","arguments":{}}},{"function":{"name":"c","arguments":{}}}]},"done":false}
{"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"d","arguments":{}}}]},"done":false}
{"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"e","arguments":{}}}]},"done":false}
{"message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":5,"eval_count":1}
`,
			want: Reply{Status: 200, Complete: true, PromptTokens: 5, CachedTokens: -1, OutputTokens: 1, FinishReason: "stop",
				ToolCalls: []ReplyCall{{Name: "a", Arguments: "{}"}, {Name: "b", Arguments: "{}"}, {Name: "c", Arguments: "{}"},
					{Name: "d", Arguments: "{}"}, {Name: "e", Arguments: "{}"}}},
		},
		{
			name:  "openai stream with usage and tool call deltas",
			ctype: "text/event-stream",
			d:     OpenAI,
			body: "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n" +
				"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"ci\"}}]}}]}\n\n" +
				"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"ty\\\":1}\"}}]}}]}\n\n" +
				"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":99,\"completion_tokens\":5,\"total_tokens\":104}}\n\n" +
				"data: [DONE]\n\n",
			want: Reply{Status: 200, Complete: true, PromptTokens: 99, CachedTokens: -1, OutputTokens: 5, FinishReason: "tool_calls",
				ToolCalls: []ReplyCall{{ID: "call_1", Name: "get", Arguments: `{"city":1}`}}},
		},
		{
			name:  "openai stream without done",
			ctype: "text/event-stream",
			d:     OpenAI,
			body:  "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"par\"}}]}\n\n",
			want:  Reply{Status: 200, PromptTokens: -1, CachedTokens: -1, Content: "par"},
		},
		{
			name:  "openai whole",
			ctype: "application/json",
			d:     OpenAI,
			body:  `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi","reasoning_content":"r"},"finish_reason":"length"}],"usage":{"prompt_tokens":11,"completion_tokens":1,"total_tokens":12}}`,
			want:  Reply{Status: 200, Complete: true, PromptTokens: 11, CachedTokens: -1, OutputTokens: 1, Content: "Hi", Thinking: "r", FinishReason: "length"},
		},
		{
			name:  "error body",
			ctype: "application/json",
			d:     OpenAI,
			body:  `{"error":{"message":"bad","type":"invalid_request_error"}}`,
			want:  Reply{Status: 200, PromptTokens: -1, CachedTokens: -1},
		},
		{
			name:  "garbage",
			ctype: "application/x-ndjson",
			d:     Ollama,
			body:  "not json\n{\"done\":\n",
			want:  Reply{Status: 200, PromptTokens: -1, CachedTokens: -1},
		},
	}
	for _, tc := range cases {
		for _, n := range []int{1, 7, 4096} {
			out, got := tapThrough(t, tc.body, tc.ctype, tc.d, n)
			if out != tc.body {
				t.Errorf("%s/%d: the tap changed the bytes", tc.name, n)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(Reply{})); diff != "" {
				t.Errorf("%s/%d: (-want +got)\n%s", tc.name, n, diff)
			}
		}
	}
}
