package ggufgen

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// TestGLMOCRVision: Shape.Vision adds GLM-OCR's vision tower and
// projector with the keys Ollama's model code and image processor read,
// the image tokens' ids taken from the vocabulary; a vocabulary without
// them is refused.
func TestGLMOCRVision(t *testing.T) {
	dir := t.TempDir()
	v := vocabgen.BPE(600, "glm4", 1)
	if err := Write(filepath.Join(dir, "bare.gguf"), v, Shape{Arch: "glmocr", Vision: true}); err == nil || !strings.Contains(err.Error(), "<|begin_of_image|>") {
		t.Errorf("a vocabulary without the image tokens: %v", err)
	}
	v = v.WithSpecials("<|begin_of_image|>", "<|end_of_image|>", "<|image|>")
	path := filepath.Join(dir, "vision.gguf")
	if err := Write(path, v, Shape{Arch: "glmocr", Vision: true, Embedding: 8, Heads: 2, KVHeads: 1, Layers: 1, FeedForward: 16}); err != nil {
		t.Fatal(err)
	}
	g := decodeFile(t, path)
	kv := g.KV()
	if kv.Uint("vision.block_count") != 1 || kv.Uint("vision.patch_size") != 14 || kv.Uint("vision.spatial_merge_size") != 2 ||
		kv.Uint("vision.temporal_patch_size") != 2 || kv.Uint("vision.out_hidden_size") != 8 ||
		kv.Uint("vision.min_pixels") != GLMOCRMinPixels || kv.Uint("vision.max_pixels") != GLMOCRMaxPixels {
		t.Errorf("vision keys: blocks %d, patch %d, merge %d, temporal %d, out %d, pixels %d to %d",
			kv.Uint("vision.block_count"), kv.Uint("vision.patch_size"), kv.Uint("vision.spatial_merge_size"),
			kv.Uint("vision.temporal_patch_size"), kv.Uint("vision.out_hidden_size"), kv.Uint("vision.min_pixels"), kv.Uint("vision.max_pixels"))
	}
	for key, token := range map[string]string{"image_start_token_id": "<|begin_of_image|>", "image_end_token_id": "<|end_of_image|>",
		"image_token_id": "<|image|>"} {
		if id := int(kv.Uint(key)); id >= len(v.Tokens) || v.Tokens[id] != token {
			t.Errorf("%s %d, want the id of %s", key, id, token)
		}
	}
	checkShapes(t, g, map[string][]uint64{
		"v.patch_embd_0.weight":      {14, 14, 3, 32},
		"v.patch_embd_1.weight":      {14, 14, 3, 32},
		"v.patch_embd.bias":          {32},
		"v.blk.0.attn_qkv.weight":    {32, 96},
		"v.blk.0.attn_q_norm.weight": {16},
		"v.blk.0.ffn_down.weight":    {64, 32},
		"v.post_ln.weight":           {32},
		"mm.patch_merger.weight":     {2, 2, 32, 8},
		"mm.model.fc.weight":         {8, 8},
		"mm.post_norm.bias":          {8},
		"mm.gate.weight":             {8, 16},
		"mm.down.weight":             {16, 8},
	})
	// Without Vision: no tower, and a block count of 0 (Ollama then
	// loads the text model alone).
	plain := filepath.Join(dir, "plain.gguf")
	if err := Write(plain, v, Shape{Arch: "glmocr"}); err != nil {
		t.Fatal(err)
	}
	g = decodeFile(t, plain)
	if n, ok := g.KV()["glmocr.vision.block_count"].(uint32); !ok || n != 0 {
		t.Errorf("text-only vision.block_count %v", g.KV()["glmocr.vision.block_count"])
	}
	for _, tn := range g.Tensors().Items() {
		if strings.HasPrefix(tn.Name, "v.") || strings.HasPrefix(tn.Name, "mm.") {
			t.Errorf("a text-only file has %s", tn.Name)
		}
	}
}
