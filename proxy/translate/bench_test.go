package translate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// chatBody builds a realistic OpenAI request of about size bytes: a system
// prompt, tools, and alternating turns with tool calls and results.
func chatBody(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"qwen3:8b","stream":true,"stream_options":{"include_usage":true},"temperature":0.7,"max_tokens":1024,"stop":["<|end|>"],`)
	b.WriteString(`"tools":[{"type":"function","function":{"name":"search","description":"Search the docs","parameters":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}}}],`)
	b.WriteString(`"messages":[{"role":"system","content":"You are a helpful assistant. Answer with care."}`)
	para := `Here is some text about the \"proxy\" and its context window.\nIt goes on for a while, with punctuation, numbers like 42 and 3.14, and unicode: café. `
	for i := 0; b.Len() < size-600; i++ {
		fmt.Fprintf(&b, `,{"role":"user","content":"%s"}`, strings.Repeat(para, 4))
		if i%5 == 4 {
			fmt.Fprintf(&b, `,{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":"search","arguments":"{\"q\":\"context %d\"}"}}]}`, i, i)
			fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"call_%d","content":"%s"}`, i, strings.Repeat(para, 2))
		}
		fmt.Fprintf(&b, `,{"role":"assistant","content":"%s"}`, strings.Repeat(para, 3))
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func BenchmarkRequest100KB(b *testing.B) {
	body := chatBody(100 << 10)
	if _, _, err := Request(body, RequestOptions{NumCtx: 8192}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		_, _, _ = Request(body, RequestOptions{NumCtx: 8192})
	}
}

// BenchmarkMapRoundTrip100KB is the naive way to edit a body:
// decoding the same body into map[string]any and encoding it again.
func BenchmarkMapRoundTrip100KB(b *testing.B) {
	body := chatBody(100 << 10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			b.Fatal(err)
		}
		_, _ = json.Marshal(m)
	}
}

var benchLine = []byte(`{"model":"qwen3:8b","created_at":"2025-06-01T12:00:00.123456789Z","message":{"role":"assistant","content":" context"},"done":false}`)

func BenchmarkStreamChunk(b *testing.B) {
	s := NewStream(Info{Model: "qwen3:8b", Stream: true}, ResponseOptions{ID: "chatcmpl-bench"})
	out, _ := s.Append(nil, benchLine) // first line: role and prefix
	b.SetBytes(int64(len(benchLine)))
	b.ReportAllocs()
	for b.Loop() {
		out, _ = s.Append(out[:0], benchLine)
	}
}

func BenchmarkResponse(b *testing.B) {
	body := []byte(`{"model":"qwen3:8b","created_at":"2025-06-01T12:00:00.123456789Z","message":{"role":"assistant","content":"` +
		strings.Repeat("A sentence of the answer. ", 40) + `","thinking":"Short thought."},"done":true,"done_reason":"stop",` +
		`"total_duration":123456789,"load_duration":1234,"prompt_eval_count":812,"prompt_eval_duration":1234,"eval_count":240,"eval_duration":5678}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		_, _ = Response(body, Info{}, ResponseOptions{ID: "chatcmpl-bench"})
	}
}
