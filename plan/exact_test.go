package plan

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// conversation is a chat body of a system prompt and n messages of
// 50–350 generated words, ending with the user's turn.
func conversation(n int, seed uint64) []byte {
	msgs := []map[string]any{{"role": "system", "content": "You are terse. " + vocabgen.Text(100, seed)}}
	rng := rand.New(rand.NewPCG(seed, 3))
	for i := range n {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": vocabgen.Text(50+rng.IntN(300), seed+uint64(i))})
	}
	if n%2 == 0 {
		msgs = append(msgs, map[string]any{"role": "user", "content": "and now?"})
	}
	b, _ := json.Marshal(map[string]any{"model": "tiny", "messages": msgs, "stream": false})
	return b
}

// BenchmarkExactCounting is what exact counting adds to one request of a
// resent 100-message conversation: the count before, the overhead and each
// message's share a strategy asks for, and the count after.
func BenchmarkExactCounting(b *testing.B) {
	v := vocabgen.BPE(8000, "llama-bpe", 2)
	tok, err := exact.New(exact.Show{ModelInfo: v.KV(), Template: fakebackend.ChatML})
	if err != nil {
		b.Fatal(err)
	}
	body := conversation(100, 1)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		req, err := wire.DecodeChat(wire.Ollama, body)
		if err != nil {
			b.Fatal(err)
		}
		ec := NewExact(tok, req)
		ec.Prompt(req.Messages, req.Tools)
		ec.Overhead(req.Tools)
		for i := range req.Messages {
			ec.CountMessage(&req.Messages[i])
		}
		ec.Prompt(req.Messages, req.Tools)
	}
}
