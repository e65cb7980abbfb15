package ggufgen

// qwen3moe is Qwen 3's mixture of experts on Ollama's own engine (the
// qwen3 model code, sparse for an architecture ending in "moe"): Qwen 3's
// attention, with a router over 4 experts, 2 used per token, in place of
// the feed-forward.
func init() {
	const experts, used = 4, 2
	layouts["qwen3moe"] = Layout{
		KV: func(b *Builder) {
			b.KV["qwen3moe.attention.key_length"] = uint32(b.HeadDim)
			b.KV["qwen3moe.attention.value_length"] = uint32(b.HeadDim)
			b.KV["qwen3moe.expert_count"] = uint32(experts)
			b.KV["qwen3moe.expert_used_count"] = uint32(used)
			b.KV["qwen3moe.expert_feed_forward_length"] = uint32(b.F)
		},
		Block: func(b *Builder, p string) {
			E, F, Q, K := b.E, b.F, b.Q, b.K
			b.Add(
				b.Ones(p+"attn_norm.weight", E),
				b.Random(p+"attn_q.weight", E, Q),
				b.Ones(p+"attn_q_norm.weight", b.HeadDim),
				b.Random(p+"attn_k.weight", E, K),
				b.Ones(p+"attn_k_norm.weight", b.HeadDim),
				b.Random(p+"attn_v.weight", E, K),
				b.Random(p+"attn_output.weight", Q, E),
				b.Ones(p+"ffn_norm.weight", E),
				b.Random(p+"ffn_gate_inp.weight", E, experts),
				b.Random(p+"ffn_gate_exps.weight", E, F, experts),
				b.Random(p+"ffn_up_exps.weight", E, F, experts),
				b.Random(p+"ffn_down_exps.weight", F, E, experts),
			)
		},
	}
}
