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
