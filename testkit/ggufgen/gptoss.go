package ggufgen

// gpt-oss (Ollama's gptoss model code): attention with a learned sink
// per head, alternating sliding-window and full layers, and a
// mixture-of-experts feed-forward. Real files hold the experts in MXFP4;
// Ollama's engine loads F32 experts the same way. Four experts, two
// used per token.
//
// The names and biases are those Ollama's converter writes (attn_out,
// attn_sinks without .weight, ffn_norm; a bias on every projection and
// expert), which its own engine reads and which llama-server (Ollama 0.30
// and later) reads through Ollama's compatibility layer: it recognizes a
// published file by general.architecture gptoss and renames attn_out to
// attn_output, attn_sinks to attn_sinks.weight and ffn_norm to
// post_attention_norm by substring, so llama.cpp's names in the file
// would be renamed past them; llama.cpp's gpt-oss requires the biases.
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
			E, F, K, X := b.E, b.F, b.K, uint64(4)
			b.Add(
				b.Ones(p+"attn_norm.weight", E),
				b.Random(p+"attn_q.weight", E, E), b.Random(p+"attn_q.bias", E),
				b.Random(p+"attn_k.weight", E, K), b.Random(p+"attn_k.bias", K),
				b.Random(p+"attn_v.weight", E, K), b.Random(p+"attn_v.bias", K),
				b.Random(p+"attn_out.weight", E, E), b.Random(p+"attn_out.bias", E),
				b.Random(p+"attn_sinks", uint64(b.Shape.Heads)),
				b.Ones(p+"ffn_norm.weight", E),
				b.Random(p+"ffn_gate_inp.weight", E, X), b.Random(p+"ffn_gate_inp.bias", X),
				b.Random(p+"ffn_gate_exps.weight", E, F, X), b.Random(p+"ffn_gate_exps.bias", F, X),
				b.Random(p+"ffn_up_exps.weight", E, F, X), b.Random(p+"ffn_up_exps.bias", F, X),
				b.Random(p+"ffn_down_exps.weight", F, E, X), b.Random(p+"ffn_down_exps.bias", E, X),
			)
		},
	}
}
