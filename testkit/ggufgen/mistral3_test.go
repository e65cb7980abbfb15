package ggufgen

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// TestMistral3Vision: Shape.Vision adds Mistral 3's vision tower and
// projector with the keys Ollama's model code and image processor read;
// a vocabulary without the image tokens' fixed ids is refused.
func TestMistral3Vision(t *testing.T) {
	dir := t.TempDir()
	tiny := vocabgen.Vocab{Model: "gpt2", Pre: "tekken", Tokens: []string{"a", "b"}, Types: []int32{1, 1}}
	if err := Write(filepath.Join(dir, "tiny.gguf"), tiny, Shape{Arch: "mistral3", Vision: true}); err == nil || !strings.Contains(err.Error(), "13") {
		t.Errorf("a 2-token vocabulary: %v", err)
	}
	path := filepath.Join(dir, "vision.gguf")
	v := vocabgen.BPE(600, "tekken", 1)
	if err := Write(path, v, Shape{Arch: "mistral3", Vision: true, Embedding: 8, Heads: 2, KVHeads: 1, Layers: 1, FeedForward: 16}); err != nil {
		t.Fatal(err)
	}
	g := decodeFile(t, path)
	kv := g.KV()
	if kv.Uint("vision.block_count") != 1 || kv.Uint("vision.longest_edge") != Mistral3LongestEdge ||
		kv.Uint("vision.image_size") != Mistral3LongestEdge || kv.Uint("vision.patch_size") != 14 ||
		kv.Uint("spatial_merge_size") != 2 || kv.Uint("vision.attention.key_length")*kv.Uint("vision.attention.head_count") != 32 {
		t.Errorf("vision keys: blocks %d, longest edge %d, image %d, patch %d, merge %d", kv.Uint("vision.block_count"),
			kv.Uint("vision.longest_edge"), kv.Uint("vision.image_size"), kv.Uint("vision.patch_size"), kv.Uint("spatial_merge_size"))
	}
	checkShapes(t, g, map[string][]uint64{
		"v.patch_conv.weight":                  {14, 14, 3, 32},
		"v.encoder_norm.weight":                {32},
		"v.blk.0.attn_norm.weight":             {32},
		"v.blk.0.attn_q.weight":                {32, 32},
		"v.blk.0.attn_output.weight":           {32, 32},
		"v.blk.0.ffn_gate.weight":              {32, 64},
		"v.blk.0.ffn_down.weight":              {64, 32},
		"mm.norm.weight":                       {32},
		"mm.patch_merger.merging_layer.weight": {128, 32},
		"mm.linear_1.weight":                   {32, 8},
		"mm.linear_2.weight":                   {8, 8},
	})
	// Without Vision, no tower.
	plain := filepath.Join(dir, "plain.gguf")
	if err := Write(plain, v, Shape{Arch: "mistral3"}); err != nil {
		t.Fatal(err)
	}
	for _, tn := range decodeFile(t, plain).Tensors().Items() {
		if strings.HasPrefix(tn.Name, "v.") || strings.HasPrefix(tn.Name, "mm.") {
			t.Errorf("a text-only file has %s", tn.Name)
		}
	}
}
