package ggufgen

// llama4 is Llama 4's text model as Ollama's own engine loads it
// (model/models/llama4): Llama's attention, with the head width a key of
// its own (Ollama's default is 128), and a mixture of experts on every
// second layer (interleave_moe_layer_step 2, as Llama 4 Maverick has),
// the others Llama's gated feed-forward. An expert layer has a router, 4
// experts of which each token uses 1, and a shared expert beside them.
// The vision tower is left out (Ollama builds it only when its tensors
// exist).
func init() {
	const experts = 4
	layouts["llama4"] = Layout{
		KV: func(b *Builder) {
			b.KV["llama4.attention.head_dim"] = uint32(b.HeadDim)
			b.KV["llama4.attention.chunk_size"] = uint32(8192)
			b.KV["llama4.expert_count"] = uint32(experts)
			b.KV["llama4.expert_used_count"] = uint32(1)
			b.KV["llama4.expert_feed_forward_length"] = uint32(b.F)
			b.KV["llama4.interleave_moe_layer_step"] = uint32(2)
			b.KV["llama4.use_qk_norm"] = true
		},
		Block: func(b *Builder, p string) {
			F := b.F
			normedAttention(b, p)
			if (blockIndex(p)+1)%2 != 0 {
				b.FeedForward(p, F)
				return
			}
			b.Experts(p, experts, F)
			b.SharedExpert(p, F)
		},
	}
}
