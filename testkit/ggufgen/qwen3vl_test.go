package ggufgen

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/fs/ggml"
)

// TestQwen3VLVision: Shape.Vision adds Qwen 3 VL's vision tower and
// merger to qwen3vl and qwen3vlmoe (whose image tokens have fixed ids:
// a vocabulary too small for them is refused) and to qwen3next, qwen35
// and qwen35moe (whose image tokens' ids are keys, set to the
// vocabulary's markers: a vocabulary without them is refused), with the
// keys Ollama's model code reads.
func TestQwen3VLVision(t *testing.T) {
	dir := t.TempDir()
	small := vocabgen.BPE(600, "qwen2", 1)
	if err := Write(filepath.Join(dir, "small.gguf"), small, Shape{Arch: "qwen3vl", Vision: true}); err == nil || !strings.Contains(err.Error(), "151655") {
		t.Errorf("qwen3vl with a 600-token vocabulary: %v", err)
	}
	if err := Write(filepath.Join(dir, "bare.gguf"), small, Shape{Arch: "qwen35", Vision: true}); err == nil || !strings.Contains(err.Error(), "<|image_pad|>") {
		t.Errorf("qwen35 without the image markers: %v", err)
	}
	// Only the vocabulary's size matters for qwen3vl: made-up pieces.
	big := vocabgen.Vocab{Model: "gpt2", Pre: "qwen2"}
	for i := range 151656 {
		big.Tokens = append(big.Tokens, fmt.Sprintf("t%d", i))
		big.Types = append(big.Types, vocabgen.TypeNormal)
	}
	markers := small.WithSpecials("<|vision_start|>", "<|vision_end|>", "<|image_pad|>")
	for _, c := range []struct {
		arch  string
		vocab vocabgen.Vocab
		ids   bool
	}{{"qwen3vl", big, false}, {"qwen3vlmoe", big, false}, {"qwen3next", markers, true}, {"qwen35", markers, true}, {"qwen35moe", markers, true}} {
		t.Run(c.arch, func(t *testing.T) {
			kv, tensors := writeVision(t, c.vocab, c.arch)
			if kv.Uint("vision.block_count") != 1 || kv.Uint("vision.patch_size")*kv.Uint("vision.spatial_merge_size") != Qwen3VLFactor ||
				kv.Uint("vision.shortest_edge") != Qwen3VLShortestEdge || kv.Uint("vision.num_positional_embeddings") != 16 {
				t.Errorf("vision keys: blocks %d, patch %d, merge %d, shortest edge %d, positions %d", kv.Uint("vision.block_count"),
					kv.Uint("vision.patch_size"), kv.Uint("vision.spatial_merge_size"), kv.Uint("vision.shortest_edge"), kv.Uint("vision.num_positional_embeddings"))
			}
			if c.ids {
				for key, tok := range map[string]string{"image_token_id": "<|image_pad|>", "vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>"} {
					if id := kv.Uint(key, 1<<31); int(id) >= len(c.vocab.Tokens) || c.vocab.Tokens[id] != tok {
						t.Errorf("%s %d, want the id of %s", key, id, tok)
					}
				}
			}
			for name, shape := range map[string][]uint64{
				"v.patch_embed.weight":          {16, 16, 2, 96},
				"v.patch_embed.bias":            {32},
				"v.pos_embed.weight":            {32, 16},
				"v.blk.0.norm1.bias":            {32},
				"v.blk.0.attn_out.weight":       {32, 32},
				"v.blk.0.mlp.linear_fc1.bias":   {64},
				"v.blk.0.mlp.linear_fc2.bias":   {32},
				"v.merger.norm.weight":          {32},
				"v.merger.linear_fc1.weight":    {128, 128},
				"v.merger.linear_fc2.weight":    {128, 16},
				"v.merger.linear_fc2.bias":      {16},
				"blk.0.attn_norm.weight":        {16},
				"token_embd.weight":             {16, uint64(len(c.vocab.Tokens))},
				"v.blk.0.mlp.linear_fc2.weight": {64, 32},
			} {
				if got, ok := tensors[name]; !ok || !slices.Equal(got, shape) {
					t.Errorf("%s: shape %v, want %v", name, got, shape)
				}
			}
		})
	}
}

// writeVision writes a model of arch with its vision tower and returns
// its keys and its tensors' shapes (a text model 16 wide) as Ollama's GGUF reader decodes them.
func writeVision(t *testing.T, v vocabgen.Vocab, arch string) (ggml.KV, map[string][]uint64) {
	t.Helper()
	g := writeShape(t, v, Shape{Arch: arch, Seed: 1, Vision: true, Embedding: 16, Heads: 2, KVHeads: 1, FeedForward: 32})
	shapes := map[string][]uint64{}
	for _, tn := range g.Tensors().Items() {
		shapes[tn.Name] = tn.Shape
	}
	return g.KV(), shapes
}
