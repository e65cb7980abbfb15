package proxy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// quickSeeds are events quickEvent reads itself, and events it must leave
// to decodeEvent; either way the tap must end in the state decodeEvent
// alone reaches.
var quickSeeds = []string{
	`{"model":"m","created_at":"2026-01-01T00:00:00Z","message":{"role":"assistant","content":"Hel"},"done":false}`,
	`{"model":"m","message":{"role":"assistant","content":"lo \"there\"\n\u00e9\ud83d\ude00"},"done":false}`,
	`{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","total_duration":123,"prompt_eval_count":42,"eval_count":2}`,
	`{"message":{"content":"a","thinking":"b"},"done":true}`,
	`{"message":{"content":null,"thinking":null,"tool_calls":null}}`,
	`{"message":{"content":"x","tool_calls":[]}}`,
	`{"message":{"content":"x","tool_calls":[{"function":{"name":"f","arguments":{}}}]}}`,
	`{"message":{"Content":"case"}}`,
	`{"Message":{"content":"case"}}`,
	`{"mess\u0061ge":{"content":"escaped key"}}`,
	`{"message":{"content":"one"},"message":{"thinking":"two"}}`,
	`{"message":{"content":"one","content":"two"}}`,
	`{"message":{"content":5}}`,
	`{"message":"text"}`,
	`{"message":null,"done":true}`,
	`{"message":{}}`,
	`{"done":"yes"}`,
	`{"done":null,"done_reason":null}`,
	`{"done_reason":7,"done":true}`,
	`{"prompt_eval_count":1.5,"eval_count":3}`,
	`{"prompt_eval_count":null,"eval_count":3}`,
	`{"prompt_eval_count":12,"eval_count":null}`,
	`{"prompt_eval_count":99999999999999999999999}`,
	`{"prompt_eval_count":1e2}`,
	`{"prompt_eval_count":-3,"eval_count":-1}`,
	`{"error":"model not found"}`,
	`{"error":null,"message":{"content":"fine"}}`,
	`{"error":{"message":"x"},"message":{"content":"no"}}`,
	`{"choices":[{"index":0,"delta":{"content":"hi"}}]}`,
	`{"choices":null,"usage":null,"message":{"content":"ok"}}`,
	`{"usage":{"prompt_tokens":3,"completion_tokens":4}}`,
	"{\"message\":{\"content\":\"bad \xff utf8\"}}",
	`{"message":{"content":"x"}`,
	`[1,2]`,
	`null`,
	`"just a string"`,
	`{}`,
	` {"message" : { "content" : "spaced" } , "done" : true } `,
	// OpenAI's shapes.
	`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}`,
	`{"id":"c1","choices":[{"index":0,"delta":{"content":"lo \u00e9\n"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":2,"total_tokens":13}}`,
	`{"id":"c2","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":1}}`,
	`{"choices":[{"index":0,"delta":{"reasoning_content":"think","reasoning":"other"}}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning":"only"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":null}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":5}]}`,
	`{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":""}]}`,
	`{"choices":[{"index":1,"delta":{"content":"second"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"d"},"message":{"content":"m"}}]}`,
	`{"choices":[{"index":0,"delta":null,"message":{"content":"m"}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":"{}"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"x","tool_calls":[]}}]}`,
	`{"choices":[{"index":"0","delta":{"content":"x"}}]}`,
	`{"choices":[{"Index":0,"delta":{"Content":"x"}}]}`,
	`{"Choices":[{"index":0,"delta":{"content":"x"}}]}`,
	`{"choices":[null]}`,
	`{"choices":[]}`,
	`{"choices":{}}`,
	`{"choices":[{"index":0,"delta":"text"}]}`,
	`{"usage":{"prompt_tokens":null,"completion_tokens":3}}`,
	`{"usage":{"prompt_tokens":1.5}}`,
	`{"usage":{"prompt_tokens":2,"prompt_tokens":3}}`,
	`{"usage":[]}`,
	`{"choices":[{"index":0,"delta":{"content":"mixed"}}],"message":{"content":"ollama"},"done":true}`,
	`{"choices":[{"index":0,"delta":{"content":"e"}}],"error":{"message":"boom"}}`,
	"{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"bad \xff\"}}]}",
}

func compareTaps(t *testing.T, data string, whole bool) {
	t.Helper()
	quick := newTap(nil, Ollama, 200, "application/x-ndjson", 0, nil)
	full := newTap(nil, Ollama, 200, "application/x-ndjson", 0, nil)
	// Two events, so that appending and overwriting both show.
	for range 2 {
		quick.event([]byte(data), whole)
		full.decodeEvent([]byte(data), whole)
	}
	type state struct {
		R              reply
		Content, Think string
		Calls          int
	}
	got := state{quick.r, quick.content.String(), quick.think.String(), len(quick.calls)}
	want := state{full.r, full.content.String(), full.think.String(), len(full.calls)}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(reply{}, replyToolCall{})); diff != "" {
		t.Errorf("event %q (whole %v): quick path differs from the full decode (-full +quick):\n%s", data, whole, diff)
	}
}

func TestQuickEventAgreesWithDecode(t *testing.T) {
	for _, s := range quickSeeds {
		compareTaps(t, s, false)
		compareTaps(t, s, true)
	}
}

// TestQuickEventReadsCommonChunks pins that the common Ollama chunk shapes
// take the quick path (a regression to the full decode would pass the
// agreement test while losing the speed).
func TestQuickEventReadsCommonChunks(t *testing.T) {
	for _, s := range quickSeeds[:6] {
		tp := newTap(nil, Ollama, 200, "application/x-ndjson", 0, nil)
		if !tp.quickEvent([]byte(s), false) {
			t.Errorf("quickEvent declined %s", s)
		}
	}
	for _, s := range []string{quickSeeds[38], quickSeeds[39], quickSeeds[40]} {
		tp := newTap(nil, OpenAI, 200, "text/event-stream", 0, nil)
		if !tp.quickEvent([]byte(s), false) {
			t.Errorf("quickEvent declined %s", s)
		}
	}
	for _, s := range []string{quickSeeds[6], quickSeeds[7], quickSeeds[10], quickSeeds[50]} {
		tp := newTap(nil, Ollama, 200, "application/x-ndjson", 0, nil)
		if tp.quickEvent([]byte(s), false) {
			t.Errorf("quickEvent read %s, which it must leave to the full decode", s)
		}
	}
}

func FuzzQuickEvent(f *testing.F) {
	for _, s := range quickSeeds {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, data string, whole bool) {
		compareTaps(t, data, whole)
	})
}

// A streamed chunk costs the tap at most one allocation (the full decode
// took ten).
func TestQuickEventAllocs(t *testing.T) {
	chunk := []byte(`{"model":"llama3.1:8b","created_at":"2026-11-21T12:00:00Z","message":{"role":"assistant","content":"The sea "},"done":false}`)
	tp := newTap(nil, Ollama, 200, "application/x-ndjson", 0, nil)
	if n := testing.AllocsPerRun(100, func() {
		tp.event(chunk, false)
		tp.content.Reset()
	}); n > 1 {
		t.Errorf("%v allocations per streamed chunk, want at most 1", n)
	}
}

// BenchmarkTapChunk is one streamed chunk through the tap, as Ollama and
// as an OpenAI-compatible backend stream them, by the quick path and by
// the full decode.
func BenchmarkTapChunk(b *testing.B) {
	chunks := []struct {
		name    string
		dialect Dialect
		data    []byte
	}{
		{"ollama", Ollama, []byte(`{"model":"llama3.1:8b","created_at":"2026-11-21T12:00:00Z","message":{"role":"assistant","content":"The sea "},"done":false}`)},
		{"openai", OpenAI, []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":"The sea "},"finish_reason":null}]}`)},
	}
	for _, c := range chunks {
		for _, path := range []struct {
			name string
			fn   func(*tap, []byte)
		}{
			{"quick", func(t *tap, d []byte) { t.event(d, false) }},
			{"decode", func(t *tap, d []byte) { t.decodeEvent(d, false) }},
		} {
			b.Run(c.name+"/"+path.name, func(b *testing.B) {
				b.ReportAllocs()
				tp := newTap(nil, c.dialect, 200, "application/x-ndjson", 0, nil)
				for b.Loop() {
					path.fn(tp, c.data)
					tp.content.Reset()
				}
			})
		}
	}
}
