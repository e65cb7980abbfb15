package ggufgen

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// TestMllamaVision: Shape.Vision adds Llama 3.2 Vision's tower (a local
// and a global block, 40×40 patches and the class embedding, embeddings
// by aspect ratio for 2 tiles) and projector, with the keys Ollama's
// model code reads; a vocabulary too small for the image token's fixed
// id is refused; without Vision the tower's block counts stay 0.
func TestMllamaVision(t *testing.T) {
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, "small.gguf"), vocabgen.BPE(600, "llama-bpe", 1), Shape{Arch: "mllama", Vision: true}); err == nil ||
		!strings.Contains(err.Error(), "128256") {
		t.Errorf("a 600-token vocabulary: %v", err)
	}
	// Only the vocabulary's size matters here.
	v := fillerVocab("llama-bpe", mllamaImageToken+1)
	shape := Shape{Arch: "mllama", Embedding: 8, Heads: 2, KVHeads: 1, Layers: 2, FeedForward: 16}
	kv := writeShape(t, v, shape).KV()
	if kv.Uint("vision.block_count") != 0 || kv.Uint("vision.global.block_count") != 0 {
		t.Errorf("text only: vision blocks %d and %d", kv.Uint("vision.block_count"), kv.Uint("vision.global.block_count"))
	}
	shape.Vision = true
	g := writeShape(t, v, shape)
	kv = g.KV()
	if kv.Uint("vision.block_count") != 1 || kv.Uint("vision.global.block_count") != 1 ||
		kv.Uint("vision.image_size")/kv.Uint("vision.patch_size") != 40 || kv.Uint("vision.max_num_tiles") != 2 ||
		!slices.Equal(kv.Ints("vision.intermediate_layers_indices"), []int32{0}) {
		t.Errorf("vision keys: blocks %d+%d, image %d, patch %d, tiles %d, intermediate %v", kv.Uint("vision.block_count"),
			kv.Uint("vision.global.block_count"), kv.Uint("vision.image_size"), kv.Uint("vision.patch_size"),
			kv.Uint("vision.max_num_tiles"), kv.Ints("vision.intermediate_layers_indices"))
	}
	checkShapes(t, g, map[string][]uint64{
		"v.patch_embd.weight":             {2, 2, 3, 16},
		"v.class_embd":                    {16},
		"v.position_embd.weight":          {16, 1601},
		"v.tile_position_embd.weight":     {16 * 1601 * 2, 4},
		"v.pre_tile_position_embd.weight": {32, 4},
		"v.post_tile_position_embd.gate":  {1},
		"v.blk.0.attn_q.weight":           {16, 16},
		"v.global.blk.0.ffn_up.weight":    {16, 32},
		"v.global.blk.0.attn_gate":        {1},
		"v.post_ln.bias":                  {16},
		"mm.0.weight":                     {32, 8},
		"blk.0.cross_attn_k_proj.weight":  {8, 4},
	})
	for _, tn := range g.Tensors().Items("v.blk.") {
		if strings.HasSuffix(tn.Name, "_gate") {
			t.Errorf("a gate on a local block: %s", tn.Name)
		}
	}
}
