package ggufgen

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// TestDeepSeekOCRVision: without Vision the file has the tower's stub
// (no blocks), which Ollama needs to load the model; Shape.Vision adds
// three blocks to SAM (the third global) and one to CLIP; a vocabulary that does not reach the image
// token's fixed id is refused.
func TestDeepSeekOCRVision(t *testing.T) {
	dir := t.TempDir()
	small := vocabgen.BPE(600, "deepseek-v3", 1)
	if err := Write(filepath.Join(dir, "small.gguf"), small, Shape{Arch: "deepseekocr", Vision: true}); err == nil || !strings.Contains(err.Error(), "128815") {
		t.Errorf("a 600-token vocabulary: %v", err)
	}
	plain := filepath.Join(dir, "plain.gguf")
	if err := Write(plain, small, Shape{Arch: "deepseekocr"}); err != nil {
		t.Fatal(err)
	}
	g := decodeFile(t, plain)
	if kv := g.KV(); kv.Uint("sam.block_count") != 0 || kv.Uint("vision.block_count") != 0 {
		t.Errorf("the stub's blocks: SAM %d, CLIP %d", kv.Uint("sam.block_count"), kv.Uint("vision.block_count"))
	}
	checkShapes(t, g, map[string][]uint64{"s.patch_embd.weight": {16, 16, 3, 16}, "mm.layers.weight": {64, 64}})
	// Only the vocabulary's size matters here.
	v := fillerVocab("deepseek-v3", DeepSeekOCRImageToken+1)
	path := filepath.Join(dir, "vision.gguf")
	if err := Write(path, v, Shape{Arch: "deepseekocr", Vision: true, Embedding: 8, Heads: 2, KVHeads: 2, Layers: 2, FeedForward: 16}); err != nil {
		t.Fatal(err)
	}
	g = decodeFile(t, path)
	if kv := g.KV(); kv.Uint("sam.block_count") != 3 || kv.Uint("vision.block_count") != 1 {
		t.Errorf("blocks: SAM %d, CLIP %d", kv.Uint("sam.block_count"), kv.Uint("vision.block_count"))
	}
	if got := g.KV().Ints("sam.global_attention_indexes"); !slices.Equal(got, []int32{2}) {
		t.Errorf("SAM's global blocks %v, want [2]", got)
	}
	checkShapes(t, g, map[string][]uint64{
		"s.blk.0.attn.qkv.weight":           {16, 48},
		"s.blk.0.attn.rel_pos_h":            {8, 27},
		"s.blk.0.attn.rel_pos_w":            {8, 27},
		"s.blk.2.attn.rel_pos_h":            {8, 127},
		"s.blk.0.mlp.lin1.weight":           {16, 64},
		"s.blk.0.norm2.bias":                {16},
		"v.blk.0.self_attn.qkv_proj.weight": {32, 96},
		"v.blk.0.self_attn.out_proj.weight": {32, 32},
		"v.blk.0.mlp.fc2.weight":            {128, 32},
		"v.blk.0.layer_norm1.weight":        {32},
		"mm.layers.weight":                  {64, 8},
	})
}
