package budget

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/chat"
)

// benchConversation is 100 messages of about 1 KB: a ~100 KB chat.
func benchConversation(b *testing.B, seed string) ([]chat.Message, int) {
	msgs := conversation(readTestdata(b, "chat_en.txt"), 100, 1000, seed)
	size := 0
	for _, m := range msgs {
		size += len(m.Content)
	}
	return msgs, size
}

// BenchmarkResend is the proxy's common case: a 100-message, ~100 KB
// conversation resent (decoded afresh, no cached Tokens) with one new
// message. Only the new message is tokenized.
func BenchmarkResend(b *testing.B) {
	r := NewRegistry(Config{}, nil)
	mc := r.MessageCounter("llama3.1:8b")
	msgs, _ := benchConversation(b, "resend")
	mc.Prompt(fresh(msgs), nil) // the conversation so far is known
	batch := make([]chat.Message, len(msgs)+1)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		copy(batch, msgs)
		for j := range msgs {
			batch[j].Tokens = 0
		}
		batch[len(msgs)] = chat.Message{Role: "user", Content: "Thanks! One more question, number " + strconv.Itoa(i) + ": how do I rotate the logs?"}
		mc.Prompt(batch, nil)
	}
}

// BenchmarkResendWithTools adds a resent 5-tool definitions array.
func BenchmarkResendWithTools(b *testing.B) {
	r := NewRegistry(Config{}, nil)
	mc := r.MessageCounter("llama3.1:8b")
	msgs, _ := benchConversation(b, "tools")
	var defs []string
	for i := range 5 {
		defs = append(defs, `{"type":"function","function":{"name":"tool_`+strconv.Itoa(i)+`","description":"Does thing number `+strconv.Itoa(i)+` to a file","parameters":{"type":"object","properties":{"path":{"type":"string","description":"file path"}},"required":["path"]}}}`)
	}
	tools := json.RawMessage("[" + strings.Join(defs, ",") + "]")
	mc.Prompt(fresh(msgs), tools)
	batch := make([]chat.Message, len(msgs)+1)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		copy(batch, msgs)
		for j := range msgs {
			batch[j].Tokens = 0
		}
		batch[len(msgs)] = chat.Message{Role: "user", Content: "Next step " + strconv.Itoa(i)}
		mc.Prompt(batch, tools)
	}
}

// BenchmarkCold counts a ~100 KB conversation nobody has seen with
// Prompt and an empty cache, which spreads new messages over GOMAXPROCS
// goroutines (the tokenizer's BenchmarkCold counts the same texts one by
// one). Run with -cpu 1,N.
func BenchmarkCold(b *testing.B) {
	msgs, size := benchConversation(b, "cold")
	tk := mustTiktoken(b, tokenizer.EncodingCL100K)
	b.Run("Prompt", func(b *testing.B) {
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			NewMessageCounter(NewCaching(tk, 0), 0).Prompt(fresh(msgs), nil)
		}
	})
}

func BenchmarkCachingHit(b *testing.B) {
	c := NewCaching(mustTiktoken(b, tokenizer.EncodingCL100K), 0)
	text := readTestdata(b, "chat_en.txt")[:1000]
	c.Count(text)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		c.Count(text)
	}
}

func BenchmarkCachingMiss(b *testing.B) {
	c := NewCaching(mustTiktoken(b, tokenizer.EncodingCL100K), 0)
	text := readTestdata(b, "chat_en.txt")[:1000]
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Count(strconv.Itoa(i) + text)
	}
}

// BenchmarkLimits is the per-request look-up of a model's limits: the
// table's answer is remembered, and without a models: section the name is
// not normalized for it.
func BenchmarkLimits(b *testing.B) {
	r := NewRegistry(Config{}, nil)
	b.ReportAllocs()
	for b.Loop() {
		r.Window("llama3.1:8b", 131072)
	}
}

// TestPromptCountsKnownMessagesAsHits pins that counting a resent
// conversation finds each message in the count cache, one counted hit per
// message and no miss, and allocates nothing when all are known. (That a
// message is looked up once, not twice, is a matter of speed, which
// BenchmarkResend shows: the old second look-up was an uncounted peek.)
func TestPromptCountsKnownMessagesAsHits(t *testing.T) {
	tk, err := tokenizer.NewTiktoken(tokenizer.EncodingCL100K)
	if err != nil {
		t.Fatal(err)
	}
	c := NewCaching(tk, 0)
	mc := NewMessageCounter(c, 0)
	msgs := conversation(readTestdata(t, "chat_en.txt"), 100, 1000, "once")
	mc.Prompt(fresh(msgs), nil)
	before := c.Stats()
	mc.Prompt(fresh(msgs), nil)
	after := c.Stats()
	if hits, misses := after.Hits-before.Hits, after.Misses-before.Misses; hits != uint64(len(msgs)) || misses != 0 {
		t.Errorf("a resent %d-message prompt: %d look-ups hit, %d missed; want one hit per message", len(msgs), hits, misses)
	}
	batch := fresh(msgs)
	if n := testing.AllocsPerRun(20, func() {
		for i := range batch {
			batch[i].Tokens = 0
		}
		mc.Prompt(batch, nil)
	}); n > 0 {
		t.Errorf("%v allocations to count a known 100-message prompt, want none", n)
	}
}
