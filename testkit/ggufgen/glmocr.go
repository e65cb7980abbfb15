package ggufgen

// glmocr is GLM-OCR's text model on Ollama's own engine
// (model/models/glmocr): Llama's block with the attention output named
// attn_out and a second norm after attention (post_attn_norm) and after
// the feed-forward (post_ffn_norm), with multimodal rotary positions in
// sections of the head's half (rope.mrope_section, GLM-OCR's 2:3:3). The
// vision tower and its merger are left out, with vision.block_count 0:
// Ollama builds the tower from that key (24 blocks by default) and
// encodes a blank image with it when it loads the model, unless it has
// no blocks.
func init() {
	layouts["glmocr"] = Layout{
		KV: func(b *Builder) {
			b.KV["glmocr.attention.key_length"] = uint32(b.HeadDim)
			b.KV["glmocr.attention.value_length"] = uint32(b.HeadDim)
			b.KV["glmocr.rope.partial_rotary_factor"] = float32(1)
			half := int32(b.HeadDim / 2)
			b.KV["glmocr.rope.mrope_section"] = []int32{half * 2 / 8, half * 3 / 8, half - half*2/8 - half*3/8}
			b.KV["glmocr.vision.block_count"] = uint32(0)
		},
		Block: func(b *Builder, p string) {
			E, F, K := b.E, b.F, b.K
			b.Add(
				b.Ones(p+"attn_norm.weight", E),
				b.Random(p+"attn_q.weight", E, E),
				b.Random(p+"attn_k.weight", E, K),
				b.Random(p+"attn_v.weight", E, K),
				b.Random(p+"attn_out.weight", E, E),
				b.Ones(p+"post_attn_norm.weight", E),
				b.Ones(p+"ffn_norm.weight", E),
			)
			b.FeedForward(p, F)
			b.Add(
				b.Ones(p+"post_ffn_norm.weight", E),
			)
		},
	}
}
