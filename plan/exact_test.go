package plan

import (
	"testing"

	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// BenchmarkExactCounting is what exact counting adds to one request of a
// resent 100-message conversation: the count before, the overhead and each
// message's share a strategy asks for, and the count after.
func BenchmarkExactCounting(b *testing.B) {
	v := vocabgen.BPE(8000, "llama-bpe", 2)
	tok, err := exact.New(exact.Show{ModelInfo: v.KV(), Template: fakebackend.ChatML})
	if err != nil {
		b.Fatal(err)
	}
	body := vocabgen.Conversation("tiny", 100, 1, nil)
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
