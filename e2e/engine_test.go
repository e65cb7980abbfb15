//go:build e2e

package e2e

import (
	"testing"
	"time"

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
	o, err := startOllama(t.TempDir(), "OLLAMA_NEW_ENGINE=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopGroup(o.pgid, 5*time.Second) })
	const model = "gen-spm-new-engine"
	if err := createModel(o, model, vocabgen.SentencePiece(8000, 23)); err != nil {
		t.Fatal(err)
	}
	p := startCtxproxy(t, o.url, exactConfig)
	defer p.stop()
	first := chat(t, p.url, chatRequest{Model: model, Messages: conversation(970, 12)})
	sent, eval := headerInt(t, first.header, "X-Ctxproxy-Tokens"), first.final.PromptEvalCount
	t.Logf("first request: ctxproxy %d, Ollama on its own engine %d", sent, eval)
	if sent == eval {
		t.Fatal("the first request was exact: the test no longer tells the engines apart")
	}
	for i, c := range []chatRequest{
		{Model: model, Messages: conversation(971, 12)},
		{Model: model, Messages: conversation(972, 30), Stream: true},
	} {
		res := chat(t, p.url, c)
		if sent, eval := headerInt(t, res.header, "X-Ctxproxy-Tokens"), res.final.PromptEvalCount; sent != eval {
			t.Errorf("request %d after the switch: ctxproxy %d, Ollama %d", i+2, sent, eval)
		}
	}
	if !logHas(p.logPath, "counting it as that engine does from now on") {
		t.Error("the log does not say the model moved to the other engine's count")
	}
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
