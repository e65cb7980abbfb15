package ggufgen

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// TestQwen25VLVision: Shape.Vision adds Qwen 2.5 VL's vision tower with
// the keys Ollama's model code and image processor read (block_count
// above 0, which also gives the vision capability) and the tensors its
// vision model loads, shaped as it multiplies them; a vocabulary too
// small for the image tokens' fixed ids is refused. Without Vision the
// tower stays out (block_count 0, no "v." tensors).
func TestQwen25VLVision(t *testing.T) {
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, "small.gguf"), vocabgen.BPE(1000, "qwen2", 1), Shape{Arch: "qwen25vl", Vision: true}); err == nil || !strings.Contains(err.Error(), "151655") {
		t.Errorf("a 1000-token vocabulary: %v", err)
	}
	// Only the vocabulary's size matters here.
	v := fillerVocab("qwen2", qwen25vlImagePad+1)
	shape := Shape{Arch: "qwen25vl", Embedding: 8, Heads: 2, KVHeads: 1, Layers: 1, FeedForward: 16}
	text := writeShape(t, v, shape)
	if n := text.KV().Uint("vision.block_count", 32); n != 0 {
		t.Errorf("without vision: vision.block_count %d", n)
	}
	for _, tn := range text.Tensors().Items() {
		if strings.HasPrefix(tn.Name, "v.") {
			t.Errorf("without vision: tensor %s", tn.Name)
		}
	}
	shape.Vision = true
	g := writeShape(t, v, shape)
	kv := g.KV()
	for key, want := range map[string]uint32{
		"vision.block_count":          1,
		"vision.embedding_length":     32,
		"vision.attention.head_count": 2,
		"vision.patch_size":           8,
		"vision.spatial_merge_size":   2,
		"vision.window_size":          64,
		"vision.temporal_patch_size":  2,
		"vision.max_pixels":           Qwen25VLMaxPixels,
	} {
		if got := kv.Uint(key); got != want {
			t.Errorf("%s: %d, want %d", key, got, want)
		}
	}
	// The window is as many merged patches a side as the merge unit
	// holds patches: Ollama's window mask (model_vision.go) needs it.
	if w := kv.Uint("vision.window_size") / kv.Uint("vision.patch_size") / kv.Uint("vision.spatial_merge_size"); w != 4 {
		t.Errorf("window of %d merged patches", w)
	}
	checkShapes(t, g, map[string][]uint64{
		"v.patch_embd_0.weight":   {8, 8, 3, 32},
		"v.patch_embd_1.weight":   {8, 8, 3, 32},
		"v.blk.0.ln1.weight":      {32},
		"v.blk.0.attn_q.weight":   {32, 32},
		"v.blk.0.attn_out.bias":   {32},
		"v.blk.0.ln2.weight":      {32},
		"v.blk.0.ffn_gate.weight": {32, 64},
		"v.blk.0.ffn_down.weight": {64, 32},
		"v.merger.ln_q.weight":    {32},
		"v.merger.mlp.0.weight":   {128, 128},
		"v.merger.mlp.2.weight":   {128, 8},
		"v.merger.mlp.2.bias":     {8},
		"blk.0.attn_k.bias":       {4},
		"token_embd.weight":       {8, qwen25vlImagePad + 1},
	})
}
