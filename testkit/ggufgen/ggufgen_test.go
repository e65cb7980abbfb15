package ggufgen

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/fs/ggml"
)

// TestWrite_EveryLayout: every layout writes a file Ollama's GGUF
// reader decodes, of its architecture, with as many blocks as its
// block_count says (at least the layout's own minimum) and the common
// tensors.
func TestWrite_EveryLayout(t *testing.T) {
	v := vocabgen.BPE(600, "qwen2", 1)
	for arch, layout := range layouts {
		t.Run(arch, func(t *testing.T) {
			g := writeDecoded(t, v, arch)
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
				if _, ok := groups[name]; !ok {
					t.Errorf("no %s", name)
				}
			}
		})
	}
}

// writeDecoded writes a model of arch with vocabulary v and decodes it
// with Ollama's GGUF reader.
func writeDecoded(t *testing.T, v vocabgen.Vocab, arch string) *ggml.GGML {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := Write(path, v, Shape{Arch: arch, Seed: 1}); err != nil {
		t.Fatal(err)
	}
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

// TestWrite_HybridBlocks: in the hybrid layouts each block's tensors are
// those of the kind its per-block keys make it in Ollama's model code: a
// recurrent block (no KV heads, and no feed-forward length for
// Nemotron-H) has the recurrent projections, any other one attention or
// a feed-forward.
func TestWrite_HybridBlocks(t *testing.T) {
	v := vocabgen.BPE(600, "qwen2", 1)
	for _, arch := range []string{"qwen3next", "qwen35", "qwen35moe", "nemotron_h", "nemotron_h_moe"} {
		t.Run(arch, func(t *testing.T) {
			g := writeDecoded(t, v, arch)
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
