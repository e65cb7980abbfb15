package backend

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
)

// TestModelSoon: a model not read before comes back at once with what a
// plain /api/show says (its facts, no tokenizer) and a Sketch that bounds
// its prompts, while its vocabulary is still held; Wait gives the whole
// Details once it arrives, and ModelSoon then returns them with nothing
// pending.
func TestModelSoon(t *testing.T) {
	hold := make(chan struct{})
	m := &fakebackend.ModelSpec{Vocab: vocabgen.BPE(3000, "llama-bpe", 2)}
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Model: m, Pretokenizer: exact.Pretokenizer("llama-bpe"), HoldVerbose: hold})
	u, _ := url.Parse(be.URL)
	b := New(Config{URL: u, Kind: KindOllama, Client: be.Client()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	d, pend := b.ModelSoon(ctx, "tiny")
	if pend == nil || d.Tokenizer != nil || pend.Sketch == nil {
		t.Fatalf("ModelSoon: pending %v, tokenizer %v", pend != nil, d.Tokenizer != nil)
	}
	p := exact.Prompt{Messages: []api.Message{{Role: "user", Content: vocabgen.Text(400, 1)}}}
	bound, _, err := pend.Sketch.Count(p)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan Details, 1)
	go func() { waited <- pend.Wait(ctx) }()
	select {
	case <-waited:
		t.Fatal("Wait returned while the vocabulary was held")
	case <-time.After(50 * time.Millisecond):
	}
	close(hold)
	whole := <-waited
	if whole.Tokenizer == nil {
		t.Fatalf("no tokenizer after the vocabulary came: %v, %v", whole.Err, whole.TokenizerErr)
	}
	n, exactly, err := whole.Tokenizer.Count(p)
	if err != nil || !exactly || n > bound {
		t.Errorf("count %d (exact %v, %v), bound %d", n, exactly, err, bound)
	}
	if d, pend := b.ModelSoon(ctx, "tiny"); pend != nil || d.Tokenizer == nil {
		t.Errorf("a model read before: pending %v, tokenizer %v", pend != nil, d.Tokenizer != nil)
	}
	// Another name of its digest: built from what was read, no plain
	// /api/show asked.
	shows := 0
	for _, r := range be.Requests() {
		if r.Path == "/api/show" {
			shows++
		}
	}
	if d, pend := b.ModelSoon(ctx, "tiny:latest"); pend != nil || d.Tokenizer == nil {
		t.Errorf("another name of the digest: pending %v, tokenizer %v", pend != nil, d.Tokenizer != nil)
	}
	for _, r := range be.Requests() {
		if r.Path == "/api/show" {
			shows--
		}
	}
	if shows != 0 {
		t.Errorf("another name of the digest asked /api/show %d more times", -shows)
	}
}
