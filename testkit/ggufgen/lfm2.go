package ggufgen

import (
	"fmt"
	"slices"
)

// lfm2 is LFM2 on Ollama's own engine: a hybrid whose blocks are either
// a short convolution (a block with no KV heads in the per-block
// attention.head_count_kv) or attention with a norm of the queries and
// keys, each followed by a gated feed-forward. Even blocks here are
// convolutions, odd ones attention, as LFM2 starts with convolutions.
// lfm2moe is the same with routed experts in place of the feed-forward
// after the first block (leading_dense_block_count), sigmoid gating and a
// routing bias, as LFM2's MoE models have them, with the final norm named
// token_embd_norm and the experts' width in expert_feed_forward_length,
// as Ollama's converter writes them: llama-server (Ollama 0.30 and
// later) reads lfm2moe with no translation by Ollama's compatibility
// layer (which renames output_norm for lfm2 only) and needs both. Either
// has LFM2-VL's vision tower and projector when Shape.Vision asks for
// them (lfm2Vision); without, Ollama builds no tower (vision.block_count
// absent).
func init() {
	layouts["lfm2"] = lfm2Layout("lfm2", false)
	layouts["lfm2moe"] = lfm2Layout("lfm2moe", true)
}

func lfm2Layout(arch string, moe bool) Layout {
	const (
		lCache  = 3 // the convolution's width
		experts = 4
		dense   = 1 // leading blocks with a plain feed-forward
	)
	conv := func(i int) bool { return i%2 == 0 }
	return Layout{
		KV: func(b *Builder) {
			b.KV[arch+".attention.head_count_kv"] = b.KVHeads(func(i int) bool { return !conv(i) })
			b.KV[arch+".attention.key_length"] = uint32(b.HeadDim)
			b.KV[arch+".attention.value_length"] = uint32(b.HeadDim)
			b.KV[arch+".shortconv.l_cache"] = uint32(lCache)
			if moe {
				b.KV[arch+".expert_count"] = uint32(experts)
				b.KV[arch+".expert_used_count"] = uint32(2)
				b.KV[arch+".leading_dense_block_count"] = uint32(dense)
				b.KV[arch+".expert_gating_func"] = uint32(2) // sigmoid
				b.KV[arch+".expert_feed_forward_length"] = uint32(b.F)
				b.KV[arch+".expert_weights_scale"] = float32(1)
				b.Rename("output_norm.weight", "token_embd_norm.weight")
			}
		},
		Block: func(b *Builder, p string) {
			E, F, K := b.E, b.F, b.K
			i := blockIndex(p)
			b.Add(b.Ones(p+"attn_norm.weight", E))
			if conv(i) {
				b.Add(
					b.Random(p+"shortconv.conv.weight", lCache, E),
					b.Random(p+"shortconv.in_proj.weight", E, 3*E),
					b.Random(p+"shortconv.out_proj.weight", E, E),
				)
			} else {
				b.Add(
					b.Random(p+"attn_q.weight", E, E),
					b.Ones(p+"attn_q_norm.weight", b.HeadDim),
					b.Random(p+"attn_k.weight", E, K),
					b.Ones(p+"attn_k_norm.weight", b.HeadDim),
					b.Random(p+"attn_v.weight", E, K),
					b.Random(p+"attn_output.weight", E, E),
				)
			}
			b.Add(b.Ones(p+"ffn_norm.weight", E))
			if !moe || i < dense {
				b.FeedForward(p, F)
				return
			}
			b.Experts(p, experts, F)
			b.Add(b.Fill(p+"exp_probs_b.bias", 0, experts))
		},
		Vision: func(b *Builder) error { return lfm2Vision(b, arch) },
	}
}

// The tiny vision tower of a generated LFM2-VL, and its image processor's
// keys scaled down with it: 8-pixel patches merged 2×2 by the projector
// (16-pixel steps), an image of 4 to 16 tokens whole (32×32 to 64×64
// pixels), split past twice that into 64-pixel tiles of 16 tokens, 2 to
// LFM2MaxTiles of them, with a thumbnail; one encoder block 16 wide with
// 2 heads, position embeddings for 4×4 patches (interpolated to the
// image's patches, as SigLIP 2's are).
const (
	lfm2PatchSize    = 8
	lfm2Scale        = 2
	lfm2TileSize     = 64
	lfm2VisionWidth  = 16
	lfm2VisionFF     = 32
	lfm2VisionHeads  = 2
	lfm2VisionBlocks = 1
	lfm2ProjectorFF  = 32
	// LFM2MaxTiles is the generated model's vision.max_tiles: a split
	// image has at most this many tiles, and the vocabulary's row and
	// column markers (LFM2VisionSpecials) go this far.
	LFM2MaxTiles = 4
	// lfm2ImageToken is the converter's default image token id
	// (vision.image_token_id, 396) where the vocabulary has no <image>.
	lfm2ImageToken = 396
)

// LFM2VisionSpecials are the markers LFM2-VL's model code looks up by
// name in the vocabulary: <image>, <|image_start|>, <|image_end|>,
// <|img_thumbnail|> and <|img_row_R_col_C|> for rows and columns up to
// LFM2MaxTiles.
func LFM2VisionSpecials() []string {
	s := []string{"<image>", "<|image_start|>", "<|image_end|>", "<|img_thumbnail|>"}
	for r := 1; r <= LFM2MaxTiles; r++ {
		for c := 1; c <= LFM2MaxTiles; c++ {
			s = append(s, fmt.Sprintf("<|img_row_%d_col_%d|>", r, c))
		}
	}
	return s
}

// lfm2Vision adds LFM2-VL's SigLIP 2 vision tower ("v.") and projector
// ("mm.") that Ollama v0.17.4's LFM2 model code loads
// (model/models/lfm2/model_vision.go, model.go) with the keys of arch
// its converter writes (convert/convert_lfm2_vl.go), the marker ids
// among them found in the vocabulary as it finds them.
func lfm2Vision(b *Builder, arch string) error {
	toks, _ := b.KV["tokenizer.ggml.tokens"].([]string)
	image := slices.Index(toks, "<image>")
	if image < 0 {
		image = lfm2ImageToken
	}
	if n := len(toks); n <= image {
		return fmt.Errorf("ggufgen: an LFM2-VL model needs a vocabulary of more than %d tokens (its image token's id), not %d", image, n)
	}
	const (
		H, F, P = lfm2VisionWidth, lfm2VisionFF, lfm2PatchSize
		// The converter's vision.image_size: a tile merged.
		imageSize = lfm2TileSize / lfm2Scale
		sides     = imageSize / P
	)
	v := arch + ".vision."
	for k, n := range map[string]uint32{
		"block_count": lfm2VisionBlocks, "embedding_length": H, "feed_forward_length": F,
		"attention.head_count": lfm2VisionHeads, "patch_size": P, "num_channels": 3, "image_size": imageSize,
		"projector.scale_factor": lfm2Scale, "min_tiles": 2, "max_tiles": LFM2MaxTiles, "tile_size": lfm2TileSize,
		"min_image_tokens": 4, "max_image_tokens": 16, "image_token_id": uint32(image),
	} {
		b.KV[v+k] = n
	}
	b.KV[v+"attention.layer_norm_epsilon"] = float32(1e-6)
	b.KV[v+"max_pixels_tolerance"] = float32(2)
	for _, k := range []string{"do_image_splitting", "use_thumbnail", "use_image_special_tokens"} {
		b.KV[v+k] = true
	}
	b.KV[v+"projector.use_layernorm"] = false
	b.KV[v+"image_mean"] = []float32{0.5, 0.5, 0.5}
	b.KV[v+"image_std"] = []float32{0.5, 0.5, 0.5}
	for k, tok := range map[string]string{"image_start_token_id": "<|image_start|>",
		"image_end_token_id": "<|image_end|>", "image_thumbnail_token_id": "<|img_thumbnail|>"} {
		if id := slices.Index(toks, tok); id >= 0 {
			b.KV[v+k] = uint32(id)
		}
	}
	norm := func(name string) {
		b.Add(b.Ones(name+".weight", H), b.Fill(name+".bias", 0, H))
	}
	linear := func(name string, in, out uint64) {
		b.Add(b.Random(name+".weight", in, out), b.Fill(name+".bias", 0, out))
	}
	b.Add(
		b.Random("v.patch_embd.weight", P, P, 3, H),
		b.Fill("v.patch_embd.bias", 0, H),
		b.Random("v.position_embd.weight", H, sides*sides),
	)
	for i := range lfm2VisionBlocks {
		p := fmt.Sprintf("v.blk.%d.", i)
		norm(p + "ln1")
		for _, n := range []string{"attn_q", "attn_k", "attn_v", "attn_output"} {
			linear(p+n, H, H)
		}
		norm(p + "ln2")
		linear(p+"ffn_up", H, F)
		linear(p+"ffn_down", F, H)
	}
	norm("v.post_ln")
	// The projector takes scale×scale patches side by side.
	linear("mm.1", H*lfm2Scale*lfm2Scale, lfm2ProjectorFF)
	linear("mm.2", lfm2ProjectorFF, b.E)
	return nil
}
