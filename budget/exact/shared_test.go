package exact

import (
	"runtime"
	"testing"
	"weak"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// TestTablesShared: models with one vocabulary (another template, another
// name) share its tables and count the same; another vocabulary, or the
// same tokens with other merges, gets its own; and tables no model holds
// any more are released.
func TestTablesShared(t *testing.T) {
	for _, v := range []vocabgen.Vocab{vocabgen.BPE(3000, "llama-bpe", 7), vocabgen.SentencePiece(3000, 7)} {
		a, err := New(Show{Version: ollama017, ModelInfo: v.KV(), Template: templates["chatml"]})
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(Show{Version: ollama017, ModelInfo: v.KV(), Template: "{{ .Prompt }}"})
		if err != nil {
			t.Fatal(err)
		}
		if a.tables != b.tables {
			t.Errorf("%s: one vocabulary, two sets of tables", a.Name())
		}
		text := "Totals: 1234567 and 3.14159 東京の天気 <|im_start|> don't"
		na, _ := a.CountText(text)
		nb, _ := b.CountText(text)
		if na != nb || na == 0 {
			t.Errorf("%s: the same text counted %d and %d", a.Name(), na, nb)
		}
		runtime.KeepAlive(a)
		runtime.KeepAlive(b)
	}

	base := vocabgen.BPE(3000, "llama-bpe", 7).KV()
	other := vocabgen.BPE(3000, "llama-bpe", 7).KV()
	merges := other["tokenizer.ggml.merges"].([]any)
	merges[0], merges[1] = merges[1], merges[0]
	a, _ := New(Show{Version: ollama017, ModelInfo: base})
	b, _ := New(Show{Version: ollama017, ModelInfo: other})
	if a.tables == b.tables {
		t.Error("merges in another order share tables")
	}
	c, _ := New(Show{Version: ollama017, ModelInfo: vocabgen.BPE(3001, "llama-bpe", 7).KV()})
	if c.tables == a.tables {
		t.Error("another vocabulary shares tables")
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)

	// Released with the last model that had them, and built anew after.
	held := weak.Make(c.tables)
	c = nil
	runtime.GC()
	runtime.GC()
	if held.Value() != nil {
		t.Error("tables no model holds were kept")
	}
	d, _ := New(Show{Version: ollama017, ModelInfo: vocabgen.BPE(3001, "llama-bpe", 7).KV()})
	if d.tables == nil || d.tables.bpe == nil {
		t.Error("a vocabulary whose tables were released is not built again")
	}
}

// TestTablesSharedTyped: a vocabulary given typed (Show.Split, as the
// tokenizer directory keeps it) hashes to the key of the same vocabulary
// read from JSON, so the two share tables and count alike, whichever is
// built first; Split leaves the show it is given as it was.
func TestTablesSharedTyped(t *testing.T) {
	for _, v := range []vocabgen.Vocab{vocabgen.BPE(3000, "llama-bpe", 11), vocabgen.SentencePiece(3000, 11)} {
		for _, typedFirst := range []bool{false, true} {
			show := Show{Version: ollama017, ModelInfo: v.KV(), Template: templates["chatml"]}
			split := show.Split()
			if _, ok := show.ModelInfo["tokenizer.ggml.tokens"]; !ok || split.Vocab == nil {
				t.Fatal("Split took the arrays out of the show it was given, or set no Vocab")
			}
			if _, ok := split.ModelInfo["tokenizer.ggml.tokens"]; ok {
				t.Fatal("Split left the tokens in model_info")
			}
			if split.Split().Vocab != split.Vocab {
				t.Fatal("a split show split again")
			}
			order := []Show{show, split}
			if typedFirst {
				order = []Show{split, show}
			}
			a, err := New(order[0])
			if err != nil {
				t.Fatal(err)
			}
			b, err := New(order[1])
			if err != nil {
				t.Fatal(err)
			}
			// The second finds the first's tables only by keyOf's key.
			if a.tables != b.tables {
				t.Errorf("%s (typed first %v): one vocabulary, two sets of tables", a.Name(), typedFirst)
			}
			text := "Totals: 1234567 and 3.14159 東京の天気 <|im_start|> don't " + vocabgen.Text(300, 5)
			na, _ := a.CountText(text)
			nb, _ := b.CountText(text)
			if na != nb || na == 0 {
				t.Errorf("%s: the same text counted %d and %d", a.Name(), na, nb)
			}
			runtime.KeepAlive(a)
			runtime.KeepAlive(b)
		}
	}
}

// TestTokenAtTyped: model_info's tokens are read at an index whether
// they are JSON's []any or a Vocab's []string.
func TestTokenAtTyped(t *testing.T) {
	tokens := []string{"a", "<|eot_id|>"}
	for _, kv := range []map[string]any{
		{"tokenizer.ggml.tokens": tokens},
		{"tokenizer.ggml.tokens": vocabgen.AnySlice(tokens)},
	} {
		if tokenAt(kv, 1) != "<|eot_id|>" || tokenAt(kv, 2) != "" {
			t.Errorf("%T: token 1 %q, token 2 %q", kv["tokenizer.ggml.tokens"], tokenAt(kv, 1), tokenAt(kv, 2))
		}
	}
}

// TestFootprint: a vocabulary's Footprint is within a factor of two of
// the heap its tokenizer keeps in use once what it was built from is
// garbage,
// for a byte-level BPE and a SentencePiece vocabulary, and two models of
// one vocabulary name the same one.
func TestFootprint(t *testing.T) {
	for _, v := range []vocabgen.Vocab{vocabgen.BPE(128000, "llama-bpe", 9), vocabgen.SentencePiece(64000, 9)} {
		var ms runtime.MemStats
		heap := func() int64 {
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&ms)
			return int64(ms.HeapAlloc)
		}
		before := heap()
		build := func(tmpl string) *Tokenizer {
			tok, err := New(Show{Version: ollama017, ModelInfo: v.KV(), Template: tmpl})
			if err != nil {
				t.Fatal(err)
			}
			// In use: what the package builds on first use is built.
			if _, err := tok.CountText("hello"); err != nil {
				t.Fatal(err)
			}
			return tok
		}
		a := build("{{ .Prompt }}")
		kept := heap() - before
		vocab, size := a.Footprint()
		t.Logf("%s: footprint %d bytes, heap kept %d", a.Name(), size, kept)
		if size < kept/2 || size > kept*2 {
			t.Errorf("%s: footprint %d bytes, heap kept %d", a.Name(), size, kept)
		}
		b := build(templates["chatml"])
		if other, _ := b.Footprint(); other != vocab {
			t.Errorf("%s: two models of one vocabulary have two footprints", a.Name())
		}
		runtime.KeepAlive(a)
		runtime.KeepAlive(b)
	}
}
