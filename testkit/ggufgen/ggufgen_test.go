package ggufgen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/fs/ggml"
)

// TestWrite_EveryLayout: every layout writes a file Ollama's GGUF
// reader decodes, of its architecture, with as many blocks as its
// block_count says (at least the layout's own minimum) and the common
// tensors (the final norm as token_embd_norm where a layout renames it).
func TestWrite_EveryLayout(t *testing.T) {
	v := vocabgen.BPE(600, "qwen2", 1)
	for arch, layout := range layouts {
		t.Run(arch, func(t *testing.T) {
			g := writeShape(t, v, Shape{Arch: arch, Seed: 1})
			kv := g.KV()
			if kv.Architecture() != arch {
				t.Errorf("architecture %q", kv.Architecture())
			}
			blocks := int(kv.BlockCount())
			if blocks < max(2, layout.Layers) {
				t.Errorf("block_count %d, want at least %d", blocks, max(2, layout.Layers))
			}
			groups := g.Tensors().GroupLayers()
			for i := range blocks {
				if _, ok := groups["blk."+strconv.Itoa(i)]; !ok {
					t.Errorf("no tensors of block %d", i)
				}
			}
			if _, ok := groups["blk."+strconv.Itoa(blocks)]; ok {
				t.Errorf("tensors of block %d past block_count", blocks)
			}
			for _, name := range []string{"token_embd", "output_norm", "output"} {
				_, ok := groups[name]
				if name == "output_norm" && !ok {
					_, ok = groups["token_embd_norm"]
				}
				if !ok {
					t.Errorf("no %s", name)
				}
			}
		})
	}
}

// TestWrite_HybridBlocks: in the hybrid layouts each block's tensors are
// those of the kind its per-block keys make it in Ollama's model code: a
// recurrent block (no KV heads, and no feed-forward length for
// Nemotron-H) has the recurrent projections, any other one attention or
// a feed-forward.
func TestWrite_HybridBlocks(t *testing.T) {
	v := vocabgen.BPE(600, "qwen2", 1)
	for _, arch := range []string{"qwen3next", "qwen35", "qwen35moe", "nemotron_h", "nemotron_h_moe"} {
		t.Run(arch, func(t *testing.T) {
			g := writeShape(t, v, Shape{Arch: arch, Seed: 1})
			kvHeads, ffn := g.KV().HeadCountKV(), g.KV().FFNLength()
			groups := g.Tensors().GroupLayers()
			nemotron := strings.HasPrefix(arch, "nemotron_h")
			kinds := map[string]int{}
			for i := range int(g.KV().BlockCount()) {
				blk := groups["blk."+strconv.Itoa(i)]
				has := func(name string) bool { _, ok := blk[name+".weight"]; return ok }
				var kind string
				switch {
				case kvHeads[i] == 0 && (!nemotron || ffn[i] == 0):
					kind = "recurrent"
					if !has("attn_qkv") && !has("ssm_in") {
						t.Errorf("recurrent block %d without its projections", i)
					}
				case kvHeads[i] > 0:
					kind = "attention"
					if !has("attn_q") {
						t.Errorf("attention block %d without attn_q", i)
					}
				default:
					kind = "feed-forward"
					if !has("ffn_up") && !has("ffn_up_exps") {
						t.Errorf("feed-forward block %d without ffn_up", i)
					}
				}
				if kind != "recurrent" && (has("attn_qkv") || has("ssm_in")) {
					t.Errorf("%s block %d with recurrent projections", kind, i)
				}
				kinds[kind]++
			}
			if kinds["recurrent"] == 0 || kinds["attention"] == 0 || nemotron && kinds["feed-forward"] == 0 {
				t.Errorf("block kinds %v: want each kind", kinds)
			}
		})
	}
}

// writeShape writes a model of shape s with vocabulary v to a temporary
// file and decodes it with Ollama's GGUF reader.
func writeShape(t *testing.T, v vocabgen.Vocab, s Shape) *ggml.GGML {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := Write(path, v, s); err != nil {
		t.Fatal(err)
	}
	return decodeFile(t, path)
}

// decodeFile decodes the GGUF file at path with Ollama's reader, arrays
// whole.
func decodeFile(t *testing.T, path string) *ggml.GGML {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := ggml.Decode(f, -1)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// fillerVocab is a byte-level BPE vocabulary of n made-up tokens with
// pre-tokenizer pre, for tests where only its size matters (the fixed
// ids a vision layout needs).
func fillerVocab(pre string, n int) vocabgen.Vocab {
	v := vocabgen.Vocab{Model: "gpt2", Pre: pre, BOS: 0, EOS: 1}
	for i := range n {
		v.Tokens = append(v.Tokens, fmt.Sprintf("t%d", i))
		v.Types = append(v.Types, vocabgen.TypeNormal)
	}
	return v
}

// checkShapes fails t for each tensor of want that g lacks or has in
// another shape.
func checkShapes(t *testing.T, g *ggml.GGML, want map[string][]uint64) {
	t.Helper()
	names := map[string][]uint64{}
	for _, tn := range g.Tensors().Items() {
		names[tn.Name] = tn.Shape
	}
	for name, shape := range want {
		if got, ok := names[name]; !ok || !slices.Equal(got, shape) {
			t.Errorf("%s: shape %v, want %v", name, got, shape)
		}
	}
}

// TestAnswer: a model made to answer one token must have it as a normal
// token; without Answer the file is what it was.
func TestAnswer(t *testing.T) {
	v := vocabgen.SentencePiece(2000, 3)
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, "a.gguf"), v, Shape{Answer: "<|im_end|>"}); err == nil {
		t.Error("a control token was taken for the answer")
	}
	if err := Write(filepath.Join(dir, "b.gguf"), v, Shape{Answer: "no such token"}); err == nil {
		t.Error("a missing token was taken for the answer")
	}
	w := v.WithNormal("Hi")
	if err := Write(filepath.Join(dir, "c.gguf"), w, Shape{Answer: "Hi"}); err != nil {
		t.Fatal(err)
	}
	plain, answer := filepath.Join(dir, "d.gguf"), filepath.Join(dir, "c.gguf")
	if err := Write(plain, w, Shape{}); err != nil {
		t.Fatal(err)
	}
	p, _ := os.ReadFile(plain)
	a, _ := os.ReadFile(answer)
	if len(p) != len(a) || bytes.Equal(p, a) {
		t.Errorf("answer changes no weight (%d and %d bytes)", len(p), len(a))
	}
}

// TestHalfBits: float32 to IEEE half bits, rounded to the nearest (ties
// to even), subnormals and the range's ends included.
func TestHalfBits(t *testing.T) {
	for _, c := range []struct {
		f    float32
		want uint16
	}{
		{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {0.1, 0x2e66}, {65504, 0x7bff}, {1e6, 0x7c00},
		{6.1035156e-05, 0x0400}, {5.9604645e-08, 0x0001}, {1e-9, 0}, {-3.0517578e-05, 0x8200},
		{1 + 1.0/2048, 0x3c00}, {1 + 3.0/2048, 0x3c02}, // ties to even
	} {
		if got := halfBits(c.f); got != c.want {
			t.Errorf("halfBits(%g) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
}
