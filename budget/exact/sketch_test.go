package exact

import (
	"errors"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
)

// TestSketchBounds: a Sketch, built from a show answer without the
// vocabulary, counts at least what the Tokenizer built from the whole
// answer counts, on every byte-level vocabulary, template, server version
// and conversation size here (tools, thinking and special tokens' text
// included); and it renders the same prompt.
func TestSketchBounds(t *testing.T) {
	for _, vc := range vocabs() {
		if vc.vocab.Model != "gpt2" {
			continue
		}
		for name, tmpl := range templates {
			for _, version := range []string{ollama017, "0.34.3"} {
				show := Show{Version: version, ModelInfo: ollamaEngine(vc.vocab.KV()), Template: tmpl, System: "Be brief.",
					Capabilities: []string{"completion", "tools", "thinking"}}
				full, err := New(show)
				if err != nil {
					t.Fatal(err)
				}
				plain := show.Split()
				plain.Vocab = nil
				sketch, err := Sketch(plain)
				if err != nil {
					t.Fatalf("%s %s %s: %v", vc.name, name, version, err)
				}
				for _, n := range []int{0, 1, 4, 12} {
					p := Prompt{Messages: conversation(n, uint64(n)+7), Tools: tools()}
					want, _, err := full.Count(p)
					if err != nil {
						t.Fatal(err)
					}
					got, exact, err := sketch.Count(p)
					if err != nil || exact || got < want {
						t.Errorf("%s %s %s, %d turns: sketch %d (exact %v, %v), tokenizer %d; want a bound, not exact",
							vc.name, name, version, n, got, exact, err, want)
					}
					a, _ := full.Render(p)
					b, _ := sketch.Render(p)
					if a != b {
						t.Errorf("%s %s %s: the sketch renders another prompt", vc.name, name, version)
					}
				}
			}
		}
	}
}

// TestSketchRefuses: no bound for SentencePiece (a space prefix can cost
// a token of its own), nor for a renderer only the server has right.
func TestSketchRefuses(t *testing.T) {
	spm := vocabgen.SentencePiece(4000, 4).KV()
	if _, err := Sketch(Show{Version: ollama017, ModelInfo: spm, Template: templates["chatml"]}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("SentencePiece: %v", err)
	}
	bpe := vocabgen.BPE(3000, "qwen2", 3).KV()
	delete(bpe, keyTokens)
	if _, err := Sketch(Show{Version: "0.34.3", ModelInfo: bpe, Renderer: "qwen3-coder"}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a renderer on 0.34.3: %v", err)
	}
	s, err := Sketch(Show{Version: ollama017, ModelInfo: bpe, Renderer: "qwen3-coder"})
	if err != nil {
		t.Fatalf("a renderer on 0.17.4: %v", err)
	}
	n, exact, err := s.Count(Prompt{Messages: []api.Message{{Role: "user", Content: "héllo"}}})
	text, _ := s.Render(Prompt{Messages: []api.Message{{Role: "user", Content: "héllo"}}})
	if err != nil || exact || n != len(text)+2 {
		t.Errorf("Count = %d, %v, %v; want the %d bytes rendered and BOS and EOS", n, exact, err, len(text))
	}
}
