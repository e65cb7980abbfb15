package budget

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// The strategies measure with a MessageCounter: it must satisfy the
// Counter they declare (budget itself does not import rewrite).
var _ rewrite.Counter = (*MessageCounter)(nil)

// countingCounter records the texts its inner counter was asked for.
type countingCounter struct {
	tokenizer.Counter
	mu    sync.Mutex
	texts []string
}

func (c *countingCounter) Count(s string) int {
	c.mu.Lock()
	c.texts = append(c.texts, s)
	c.mu.Unlock()
	return c.Counter.Count(s)
}

func (c *countingCounter) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.texts)
}

func newCL100K(t testing.TB) *MessageCounter {
	return NewMessageCounter(NewCaching(mustTiktoken(t, tokenizer.EncodingCL100K), 0), 0)
}

// A prompt's total includes the message
// structure tokens. cl100k_base: Hello = 1 token, "Hi there!" = 3; each
// message adds 3 + 1 for its role, and the reply priming 3.
func TestPromptCountsMessageStructure(t *testing.T) {
	mc := newCL100K(t)
	msgs := []chat.Message{
		{Role: "user", Content: "Hello"},
		{Role: "assistant", Content: "Hi there!"},
	}
	est := mc.Prompt(msgs, nil)
	if got, want := est.Tokens, (3+1+1)+(3+1+3)+3; got != want {
		t.Errorf("Prompt = %d, want %d", got, want)
	}
	text := mc.CountText("Hello") + mc.CountText("Hi there!")
	if est.Tokens <= text {
		t.Errorf("Prompt = %d does not exceed the text alone (%d)", est.Tokens, text)
	}
	if got, want := msgs[0].Tokens, 5; got != want {
		t.Errorf("msgs[0].Tokens = %d, want %d", got, want)
	}
	if got, want := mc.CountMessage(&chat.Message{Role: "assistant", Content: "Hi there!"}), 7; got != want {
		t.Errorf("CountMessage = %d, want %d", got, want)
	}
}

// A tool call's structure overhead, function
// name and arguments are all counted.
func TestCountMessageToolCalls(t *testing.T) {
	mc := newCL100K(t)
	plain := chat.Message{Role: "assistant"}
	call := chat.Message{Role: "assistant", ToolCalls: []chat.ToolCall{{
		ID:        "call_1",
		Name:      "get_weather",
		Arguments: `{"location":"Paris","unit":"celsius"}`,
	}}}
	name := mc.CountText("get_weather")
	args := mc.CountText(`{"location":"Paris","unit":"celsius"}`)
	if got, want := mc.CountMessage(&call)-mc.CountMessage(&plain), perToolCall+name+args; got != want {
		t.Errorf("tool call adds %d tokens, want %d (overhead %d + name %d + arguments %d)", got, want, perToolCall, name, args)
	}
	two := chat.Message{Role: "assistant", ToolCalls: append(call.ToolCalls, chat.ToolCall{Name: "get_time", Arguments: "{}"})}
	if mc.CountMessage(&two) <= mc.CountMessage(&chat.Message{Role: "assistant", ToolCalls: call.ToolCalls}) {
		t.Errorf("a second call adds nothing")
	}
}

func TestCountMessageParts(t *testing.T) {
	mc := newCL100K(t)
	base := mc.CountMessage(&chat.Message{Role: "user", Content: "Hello"})
	tests := []struct {
		name string
		m    chat.Message
		want int
	}{
		{"name adds 1 + its tokens", chat.Message{Role: "user", Content: "Hello", Name: "alice"}, base + 1 + 1},
		{"images at 768 each", chat.Message{Role: "user", Content: "Hello", Images: make([]chat.Image, 2)}, base + 2*768},
		{"empty content", chat.Message{Role: "user"}, 4},
		{"unknown role counted", chat.Message{Role: "narrator", Content: "Hello"}, base - 1 + mc.CountText("narrator")},
		{"empty role", chat.Message{Content: "Hello"}, base - 1},
		{"invalid utf-8", chat.Message{Role: "user", Content: "\xff\xfe\xfd"}, 4 + mustTiktoken(t, tokenizer.EncodingCL100K).Count("\xff\xfe\xfd")},
		{"cached Tokens win", chat.Message{Role: "user", Content: "Hello", Tokens: 1234}, 1234},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mc.CountMessage(&tt.m); got != tt.want {
				t.Errorf("CountMessage = %d, want %d", got, tt.want)
			}
		})
	}
	custom := NewMessageCounter(NewCaching(mustTiktoken(t, tokenizer.EncodingCL100K), 0), 100)
	if got, want := custom.CountMessage(&chat.Message{Role: "user", Images: make([]chat.Image, 3)}), 4+300; got != want {
		t.Errorf("image_tokens 100: CountMessage = %d, want %d", got, want)
	}
}

// Bad input: a 10 MB message is counted (from samples), never a panic.
func TestCountHugeMessage(t *testing.T) {
	mc := newCL100K(t)
	content := strings.Repeat("All work and no play makes Jack a dull boy.\n", 10<<20/44)
	m := chat.Message{Role: "tool", Content: content}
	got := mc.CountMessage(&m)
	want := 11 * len(content) / 44 // 11 tokens a line
	if !within(got, want, 0.05) {
		t.Errorf("CountMessage(10 MB) = %d, want about %d", got, want)
	}
}

func TestTools(t *testing.T) {
	mc := newCL100K(t)
	tools := `[
	  {"type": "function", "function": {
	    "name": "get_weather",
	    "description": "Get the current weather for a city",
	    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}
	]`
	var compact strings.Builder
	for _, f := range strings.Fields(tools) {
		compact.WriteString(f)
	}
	wantText := `[{"type":"function","function":{"name":"get_weather","description":"Get the current weather for a city","parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}}]`
	tests := []struct {
		name  string
		tools string
		want  int
	}{
		{"nil", "", 0},
		{"null", "null", 0},
		{"empty array", " [ ] ", 0},
		{"definitions as compact JSON", tools, toolsOverhead + mc.CountText(wantText)},
		{"layout does not matter", compact.String(), toolsOverhead + mc.CountText(wantText)},
		{"invalid JSON counted as text", `[{"type": "function",`, toolsOverhead + mc.CountText(`[{"type": "function",`)},
		{"not an array counted as text", `{"a": 1}`, toolsOverhead + mc.CountText(`{"a": 1}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // the second time from the cache
				if got := toolTokens(mc, json.RawMessage(tt.tools)); got != tt.want {
					t.Errorf("tools = %d, want %d", got, tt.want)
				}
			}
		})
	}
	msgs := []chat.Message{{Role: "user", Content: "Weather in Paris?"}}
	without := mc.Prompt(msgs, nil).Raw
	with := mc.Prompt(msgs, json.RawMessage(tools)).Raw
	if got, want := with-without, toolTokens(mc, json.RawMessage(tools)); got != want {
		t.Errorf("tools add %d to the prompt, want %d", got, want)
	}
}

// conversation returns n messages of about size bytes each, distinct per
// seed, alternating user and assistant, with a leading system message.
func conversation(sample string, n, size int, seed string) []chat.Message {
	paras := strings.Split(sample, "\n\n")
	msgs := []chat.Message{{Role: "system", Content: "You are a helpful assistant. " + seed}}
	for i := 1; i < n; i++ {
		var b strings.Builder
		fmt.Fprintf(&b, "[%s %d] ", seed, i)
		for j := i; b.Len() < size; j++ {
			b.WriteString(paras[j%len(paras)])
			b.WriteString("\n\n")
		}
		role := "user"
		if i%2 == 0 {
			role = "assistant"
		}
		msgs = append(msgs, chat.Message{Role: role, Content: b.String()[:size]})
	}
	return msgs
}

// fresh copies msgs with no cached counts, as the proxy decodes them anew
// for every request.
func fresh(msgs []chat.Message) []chat.Message {
	out := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		m.Tokens = 0
		out[i] = m
	}
	return out
}

// Counts are cached per message, and a
// resent conversation tokenizes only its new message; the rest comes from
// the cache of text counts (the proxy decodes messages afresh each time).
func TestResentConversationTokenizesOnlyTheNewMessage(t *testing.T) {
	inner := &countingCounter{Counter: mustTiktoken(t, tokenizer.EncodingCL100K)}
	mc := NewMessageCounter(NewCaching(inner, 0), 0)
	msgs := conversation(readTestdata(t, "chat_en.txt"), 100, 1000, "resend")
	first := mc.Prompt(fresh(msgs), nil)
	before := inner.calls()

	next := append(fresh(msgs), chat.Message{Role: "user", Content: "And one more question."})
	second := mc.Prompt(next, nil)
	if got := inner.calls() - before; got != 1 {
		t.Errorf("resend tokenized %d texts, want 1 (the new message)", got)
	}
	if want := first.Raw + mc.CountMessage(&chat.Message{Role: "user", Content: "And one more question."}); second.Raw != want {
		t.Errorf("resend Raw = %d, want %d", second.Raw, want)
	}
}

// Counting many new messages in parallel gives the serial count.
func TestPromptParallelMatchesSerial(t *testing.T) {
	msgs := conversation(readTestdata(t, "chat_en.txt"), 60, 2000, "parallel")
	par := newCL100K(t).Prompt(fresh(msgs), nil)
	tk := mustTiktoken(t, tokenizer.EncodingCL100K)
	serial := NewMessageCounter(tk, 0) // no cache: no warm-up, one by one
	want := replyPriming
	for i := range msgs {
		m := msgs[i]
		m.Tokens = 0
		want += serial.CountMessage(&m)
	}
	if par.Raw != want {
		t.Errorf("parallel Prompt = %d, serial = %d", par.Raw, want)
	}
}

func TestPromptEmpty(t *testing.T) {
	if got := newCL100K(t).Prompt(nil, nil); got != (Estimate{}) {
		t.Errorf("Prompt(nil) = %+v, want zero", got)
	}
}

// A model's multiplier applies to every count.
func TestPerModelMultipliers(t *testing.T) {
	r := NewRegistry(Config{Models: map[string]Model{"slow": {Multiplier: 2}}}, nil)
	mc := r.MessageCounter("slow")
	m := chat.Message{Role: "user", Content: "Hello"}
	if got, want := mc.CountMessage(&m), 10; got != want { // (3 + 1 + 1) × 2
		t.Errorf("CountMessage = %d, want %d", got, want)
	}
	if got, want := mc.CountText("Hello"), 2; got != want {
		t.Errorf("CountText = %d, want %d", got, want)
	}
	est := mc.Prompt([]chat.Message{{Role: "user", Content: "Hello"}}, nil)
	if est.Raw != 8 || est.Tokens != 16 {
		t.Errorf("Prompt = %+v, want Raw 8, Tokens 16", est)
	}
	if mc != r.MessageCounter("slow") {
		t.Errorf("MessageCounter is not kept per model")
	}
}

// Prompt's total is its messages plus Overhead.
func TestOverhead(t *testing.T) {
	r := NewRegistry(Config{}, nil)
	r.Observe("m", Estimate{Tokens: 1000, Raw: 1000, Chars: 1100}, 1100, 0)
	mc := r.MessageCounter("m")
	tools := json.RawMessage(`[{"type":"function","function":{"name":"f","parameters":{}}}]`)
	msgs := conversation(readTestdata(t, "chat_en.txt"), 5, 300, "overhead")
	est := mc.Prompt(msgs, tools)
	sum := 0
	for _, m := range msgs {
		sum += m.Tokens
	}
	if d := est.Tokens - (sum + mc.Overhead(tools)); d < -len(msgs) || d > len(msgs) { // rounding per message
		t.Errorf("Prompt = %d, messages %d + overhead %d", est.Tokens, sum, mc.Overhead(tools))
	}
}

// Odd messages are counted, never a panic.
func TestCountMessageOddValues(t *testing.T) {
	mc := newCL100K(t)
	for name, m := range map[string]chat.Message{
		"many images":        {Role: "user", Images: make([]chat.Image, 1<<17)},
		"empty tool call":    {Role: "assistant", ToolCalls: []chat.ToolCall{{}}},
		"arguments not json": {Role: "assistant", ToolCalls: []chat.ToolCall{{Name: "f", Arguments: "{{{\xff"}}},
		"only a name":        {Name: "bob"},
		"nul bytes":          {Role: "user\x00", Content: "\x00\x00"},
	} {
		if got := mc.CountMessage(&m); got <= 0 || got > 1<<30 {
			t.Errorf("%s: CountMessage = %d", name, got)
		}
	}
}

// FuzzPrompt: any message counts, without a panic
// (go test -fuzz FuzzPrompt ./budget).
func FuzzPrompt(f *testing.F) {
	f.Add("user", "Hello", "", "f", `{"a":1}`, 0, `[{"type":"function"}]`)
	f.Add("", "\xff\xfe", "n\x00", "", "", -1, "null")
	mc := newCL100K(f)
	f.Fuzz(func(t *testing.T, role, content, name, call, args string, images int, tools string) {
		msgs := []chat.Message{{Role: role, Content: content, Name: name, Images: make([]chat.Image, min(max(images, 0), 64)),
			ToolCalls: []chat.ToolCall{{Name: call, Arguments: args}}}}
		est := mc.Prompt(msgs, json.RawMessage(tools))
		if est.Tokens < 0 || est.Raw < 0 || msgs[0].Tokens <= 0 {
			t.Errorf("Prompt = %+v, message Tokens %d", est, msgs[0].Tokens)
		}
	})
}

// toolTokens is the raw count of a tools array.
func toolTokens(mc *MessageCounter, tools json.RawMessage) int {
	n, _ := mc.tools(tools)
	return n
}
