//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// TestRealOllama_OtherEngine: an Ollama started with OLLAMA_NEW_ENGINE=1
// runs a llama-architecture SentencePiece model on its own engine, which
// tokenizes without llama.cpp's space prefix; ctxproxy, which cannot see
// the server's environment, counts it as llama.cpp runs it. The first
// request's count misses; ctxproxy then counts that prompt as the other
// engine would, finds Ollama's count, and counts the model that way from
// then on: the next requests are exact.
func TestRealOllama_OtherEngine(t *testing.T) {
	need(t)
	if llamaServer() {
		t.Skipf("Ollama %s runs every model in llama-server: there is no other engine to move a model to", suite.version)
	}
	o, err := startOllama(t.TempDir(), "OLLAMA_NEW_ENGINE=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopGroup(o.pgid, 5*time.Second) })
	p := startCtxproxy(t, o.url, exactConfig)
	defer p.stop()
	// A SentencePiece model: llama.cpp writes a space before text after
	// a special token, Ollama's engine does not. A BPE model whose file
	// says "deepseek-r1-qwen": llama.cpp splits digits one by one, as
	// Qwen 2, Ollama's llama code in threes, as Llama 3.
	for _, c := range []struct {
		model string
		vocab vocabgen.Vocab
	}{
		{"gen-spm-new-engine", vocabgen.SentencePiece(8000, 23)},
		{"gen-r1qwen-new-engine", vocabgen.BPE(8000, "deepseek-r1-qwen", 24)},
	} {
		if err := createModel(o, c.model, c.vocab); err != nil {
			t.Fatal(err)
		}
		conv := func(seed uint64, turns int) []api.Message {
			msgs := conversation(seed, turns)
			for i := range msgs {
				msgs[i].Content += fmt.Sprintf(" Totals: %d and 3.14159, 2026-11-27.", 1234567*(i+1))
			}
			return msgs
		}
		first := chat(t, p.url, chatRequest{Model: c.model, Messages: conv(970, 12)})
		sent, eval := headerInt(t, first.header, "X-Ctxproxy-Tokens"), first.final.PromptEvalCount
		t.Logf("%s, first request: ctxproxy %d, Ollama on its own engine %d", c.model, sent, eval)
		if sent == eval {
			t.Fatalf("%s: the first request was exact: the test no longer tells the engines apart", c.model)
		}
		for i, r := range []chatRequest{
			{Model: c.model, Messages: conv(971, 12)},
			{Model: c.model, Messages: conv(972, 30), Stream: true},
		} {
			res := chat(t, p.url, r)
			if sent, eval := headerInt(t, res.header, "X-Ctxproxy-Tokens"), res.final.PromptEvalCount; sent != eval {
				t.Errorf("%s, request %d after the switch: ctxproxy %d, Ollama %d", c.model, i+2, sent, eval)
			}
		}
	}
	if n := strings.Count(readFile(p.logPath), "counting it as that engine does from now on"); n != 2 {
		t.Errorf("the log says %d models moved to the other engine's count, want 2", n)
	}
}

func readFile(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

// TestRealOllama_BOSDefaults: for models whose file does not say whether
// to add a BOS token, ctxproxy adds one as the runner does, so its count
// equals Ollama's to the token: llama.cpp adds it for SentencePiece and
// the Llama 3 BPE family, not for other BPE pre-tokenizers.
func TestRealOllama_BOSDefaults(t *testing.T) {
	o := need(t)
	p := startCtxproxy(t, o.url, exactConfig)
	defer p.stop()
	for _, g := range []struct {
		name  string
		vocab vocabgen.Vocab
	}{
		{"gen-nobos-qwen2", vocabgen.BPE(4000, "qwen2", 41)},
		{"gen-nobos-llama-bpe", vocabgen.BPE(4000, "llama-bpe", 42)},
		{"gen-nobos-spm", vocabgen.SentencePiece(4000, 43)},
	} {
		g.vocab.NoAddBOSKey = true
		ensureModel(t, o, g.name, g.vocab)
		res := chat(t, p.url, chatRequest{Model: g.name, Messages: conversation(980, 3)})
		if sent, eval := headerInt(t, res.header, "X-Ctxproxy-Tokens"), res.final.PromptEvalCount; sent != eval {
			t.Errorf("%s: ctxproxy %d, Ollama %d", g.name, sent, eval)
		}
	}
}
