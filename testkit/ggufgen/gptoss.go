package ggufgen

// gpt-oss (Ollama's gptoss model code): attention with a learned sink
// per head, alternating sliding-window and full layers, and a
// mixture-of-experts feed-forward. Real files hold the experts in MXFP4;
// Ollama's engine loads F32 experts the same way. Four experts, two
// used per token.
func init() {
	layouts["gptoss"] = Layout{
		KV: func(b *Builder) {
			b.KV["gptoss.expert_count"] = uint32(4)
			b.KV["gptoss.expert_used_count"] = uint32(2)
			b.KV["gptoss.attention.key_length"] = uint32(b.HeadDim)
			b.KV["gptoss.attention.value_length"] = uint32(b.HeadDim)
			b.KV["gptoss.attention.sliding_window"] = uint32(128)
			b.KV["gptoss.rope.scaling.factor"] = float32(1)
			b.KV["gptoss.rope.scaling.original_context_length"] = uint32(b.Shape.Context)
		},
		Block: func(b *Builder, p string) {
			E, F, X := b.E, b.F, uint64(4)
			b.Add(
				b.Ones(p+"attn_norm.weight", E),
			)
			b.Attention(p)
			b.Add(
				b.Random(p+"attn_sinks.weight", uint64(b.Shape.Heads)),
				b.Ones(p+"post_attention_norm.weight", E),
				b.Random(p+"ffn_gate_inp.weight", E, X),
				b.Random(p+"ffn_gate_exps.weight", E, F, X),
				b.Random(p+"ffn_up_exps.weight", E, F, X),
				b.Random(p+"ffn_down_exps.weight", F, E, X),
			)
		},
	}
}
