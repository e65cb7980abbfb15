package ggufgen

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// TestGemma3Vision: Shape.Vision adds Gemma 3's vision tower and
// projector, with the keys Ollama's model code reads and the vision
// capability's key; a vocabulary too small for the image tokens' fixed
// ids is refused, and an architecture without a tower too.
func TestGemma3Vision(t *testing.T) {
	dir := t.TempDir()
	small := vocabgen.SentencePiece(1000, 1)
	if err := Write(filepath.Join(dir, "small.gguf"), small, Shape{Arch: "gemma3", Vision: true}); err == nil || !strings.Contains(err.Error(), "256000") {
		t.Errorf("a 1000-token vocabulary: %v", err)
	}
	if err := Write(filepath.Join(dir, "llama.gguf"), small, Shape{Vision: true}); err == nil {
		t.Error("llama with vision: no error")
	}
	// Only the vocabulary's size matters here: a list of made-up pieces
	// (a real SentencePiece vocabulary of this size takes seconds).
	v := vocabgen.Vocab{Model: "llama", AddBOS: true, BOS: 1, EOS: 2}
	for i := range 256001 {
		v.Tokens = append(v.Tokens, fmt.Sprintf("▁t%d", i))
		v.Types = append(v.Types, vocabgen.TypeNormal)
		v.Scores = append(v.Scores, 0)
	}
	path := filepath.Join(dir, "vision.gguf")
	if err := Write(path, v, Shape{Arch: "gemma3", Vision: true, Embedding: 8, Heads: 2, KVHeads: 1, Layers: 1, FeedForward: 16}); err != nil {
		t.Fatal(err)
	}
	g := decodeFile(t, path)
	kv := g.KV()
	if kv.Uint("vision.block_count") != 1 || kv.Uint("mm_tokens_per_image") != Gemma3VisionTokens ||
		kv.Uint("vision.image_size")/kv.Uint("vision.patch_size") != 4 {
		t.Errorf("vision keys: blocks %d, tokens %d, image %d, patch %d", kv.Uint("vision.block_count"),
			kv.Uint("mm_tokens_per_image"), kv.Uint("vision.image_size"), kv.Uint("vision.patch_size"))
	}
	checkShapes(t, g, map[string][]uint64{
		"v.patch_embedding.weight":      {14, 14, 3, 32},
		"v.position_embedding.weight":   {32, 16},
		"v.blk.0.attn_q.weight":         {32, 32},
		"v.blk.0.mlp.fc1.weight":        {32, 64},
		"v.post_layernorm.bias":         {32},
		"mm.mm_soft_emb_norm.weight":    {32},
		"mm.mm_input_projection.weight": {8, 32},
	})
}
