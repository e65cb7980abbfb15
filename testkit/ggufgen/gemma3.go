package ggufgen

// gemma3 is Gemma 3's text model as Ollama's own engine loads it
// (model/models/gemma3): Llama's block with a norm of the queries and
// keys of each head and a second norm after attention and after the
// feed-forward. Its head width is a key of its own (Ollama's default is
// 256), half the layers use a sliding window, and the vision tower is
// left out (Ollama builds it only when its tensors exist).
func init() {
	layouts["gemma3"] = Layout{
		KV: func(b *Builder) {
			b.KV["gemma3.attention.key_length"] = uint32(b.HeadDim)
			b.KV["gemma3.attention.value_length"] = uint32(b.HeadDim)
			b.KV["gemma3.attention.sliding_window"] = uint32(512)
			b.KV["gemma3.rope.local.freq_base"] = float32(10000)
			b.KV["gemma3.attention.layer_norm_rms_epsilon"] = float32(1e-6)
		},
		Block: func(b *Builder, p string) {
			llamaBlock(b, p)
			b.Add(
				b.Ones(p+"attn_q_norm.weight", b.HeadDim),
				b.Ones(p+"attn_k_norm.weight", b.HeadDim),
				b.Ones(p+"post_attention_norm.weight", b.E),
				b.Ones(p+"post_ffw_norm.weight", b.E),
			)
		},
	}
}
