package ggufgen

import (
	"slices"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// TestLFM2Vision: Shape.Vision adds LFM2-VL's tower and projector to
// lfm2 and lfm2moe, with the converter's keys under each architecture's
// name and the markers' ids found in the vocabulary; the image token
// falls back to id 396, which a small vocabulary lacks; without Vision
// there is no vision.block_count, so no vision capability.
func TestLFM2Vision(t *testing.T) {
	v := vocabgen.BPE(600, "lfm2", 1).WithSpecials(LFM2VisionSpecials()...)
	for _, arch := range []string{"lfm2", "lfm2moe"} {
		t.Run(arch, func(t *testing.T) {
			kv := writeShape(t, v, Shape{Arch: arch}).KV()
			if _, ok := kv[arch+".vision.block_count"]; ok {
				t.Error("text only: vision.block_count")
			}
			g := writeShape(t, v, Shape{Arch: arch, Vision: true})
			kv = g.KV()
			for key, want := range map[string]string{
				"image_token_id": "<image>", "image_start_token_id": "<|image_start|>",
				"image_end_token_id": "<|image_end|>", "image_thumbnail_token_id": "<|img_thumbnail|>",
			} {
				if id := int(kv.Uint("vision." + key)); id != slices.Index(v.Tokens, want) {
					t.Errorf("vision.%s %d, want %s's id %d", key, id, want, slices.Index(v.Tokens, want))
				}
			}
			if kv.Uint("vision.block_count") != 1 || kv.Uint("vision.patch_size") != 8 || kv.Uint("vision.tile_size") != 64 ||
				kv.Uint("vision.max_tiles") != LFM2MaxTiles || kv.Float("vision.max_pixels_tolerance") != 2 ||
				!kv.Bool("vision.do_image_splitting") || !kv.Bool("vision.use_thumbnail") {
				t.Errorf("vision keys: %v", kv)
			}
			checkShapes(t, g, map[string][]uint64{
				"v.patch_embd.weight":     {8, 8, 3, 16},
				"v.position_embd.weight":  {16, 16},
				"v.blk.0.ln1.bias":        {16},
				"v.blk.0.attn_q.weight":   {16, 16},
				"v.blk.0.ffn_down.weight": {32, 16},
				"v.post_ln.weight":        {16},
				"mm.1.weight":             {64, 32},
				"mm.2.weight":             {32, 64},
			})
		})
	}
	small := vocabgen.BPE(300, "lfm2", 1)
	if err := Write(t.TempDir()+"/s.gguf", small, Shape{Arch: "lfm2", Vision: true}); err == nil || !strings.Contains(err.Error(), "396") {
		t.Errorf("a 300-token vocabulary without <image>: %v", err)
	}
}
