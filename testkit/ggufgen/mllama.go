package ggufgen

import (
	"slices"
)

// mllama is Llama 3.2 Vision's text model on Ollama's own engine
// (model/models/mllama): Llama's blocks, but the layers listed in
// attention.cross_attention_layers attend to the image instead of the
// text (cross_attn_*: queries from the text, keys and values from the
// projected image, a norm of the queries and keys of each head, and a
// tanh gate on attention and on the feed-forward). Here the first layer
// is a cross-attention one and the last a self-attention one, as in Llama
// 3.2 Vision (layers 3, 8, … 38 of 40); without an image Ollama skips the
// cross-attention layers. The vision tower and projector are left out:
// Ollama builds the tower from vision.block_count and
// vision.global.block_count, and refuses images when either is 0.
func init() {
	cross := []int32{0}
	layouts["mllama"] = Layout{
		KV: func(b *Builder) {
			b.KV["mllama.attention.cross_attention_layers"] = cross
			b.KV["mllama.vision.block_count"] = uint32(0)
			b.KV["mllama.vision.global.block_count"] = uint32(0)
		},
		Block: func(b *Builder, p string) {
			if !slices.Contains(cross, int32(blockIndex(p))) {
				llamaBlock(b, p)
				return
			}
			E, F, K := b.E, b.F, b.K
			b.Add(
				b.Ones(p+"attn_norm.weight", E),
				b.Random(p+"cross_attn_q_proj.weight", E, E),
				b.Ones(p+"cross_attn_q_norm.weight", b.HeadDim),
				b.Random(p+"cross_attn_k_proj.weight", E, K),
				b.Ones(p+"cross_attn_k_norm.weight", b.HeadDim),
				b.Random(p+"cross_attn_v_proj.weight", E, K),
				b.Random(p+"cross_attn_o_proj.weight", E, E),
				b.Fill(p+"cross_attn_attn_gate", 0.5, 1),
				b.Ones(p+"ffn_norm.weight", E),
			)
			b.FeedForward(p, F)
			b.Add(
				b.Fill(p+"cross_attn_mlp_gate", 0.5, 1),
			)
		},
	}
}
