package ggufgen

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// TestLlama4Vision: Shape.Vision adds Llama 4's vision tower, adapter and
// projector with the keys Ollama's model code and image processor read;
// a vocabulary too small for the image tokens' fixed ids is refused.
func TestLlama4Vision(t *testing.T) {
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, "small.gguf"), vocabgen.BPE(600, "llama4", 1), Shape{Arch: "llama4", Vision: true}); err == nil || !strings.Contains(err.Error(), "200092") {
		t.Errorf("a 600-token vocabulary: %v", err)
	}
	// Only the vocabulary's size matters here.
	v := fillerVocab("llama4", llama4Patch+1)
	path := filepath.Join(dir, "vision.gguf")
	if err := Write(path, v, Shape{Arch: "llama4", Vision: true, Embedding: 8, Heads: 2, KVHeads: 1, FeedForward: 16}); err != nil {
		t.Fatal(err)
	}
	g := decodeFile(t, path)
	kv := g.KV()
	if kv.Uint("vision.block_count") != 1 || kv.Uint("vision.image_size") != Llama4TileSize || kv.Uint("vision.patch_size") != 14 ||
		kv.Float("vision.pixel_shuffle_ratio") != 0.5 || kv.Uint("vision.embedding_length") != 32 {
		t.Errorf("vision keys: blocks %d, image %d, patch %d, shuffle %v", kv.Uint("vision.block_count"),
			kv.Uint("vision.image_size"), kv.Uint("vision.patch_size"), kv.Float("vision.pixel_shuffle_ratio"))
	}
	checkShapes(t, g, map[string][]uint64{
		"v.patch_embedding.weight":        {588, 32},
		"v.class_embedding":               {32},
		"v.positional_embedding_vlm":      {32, 17},
		"v.layernorm_pre.bias":            {32},
		"v.blk.0.attn_q.weight":           {32, 32},
		"v.blk.0.mlp.fc1.weight":          {32, 64},
		"v.blk.0.ffn_norm.weight":         {32},
		"v.layernorm_post.weight":         {32},
		"v.vision_adapter.mlp.fc1.weight": {128, 32},
		"v.vision_adapter.mlp.fc2.weight": {32, 32},
		"mm.linear_1.weight":              {32, 8},
	})
}
