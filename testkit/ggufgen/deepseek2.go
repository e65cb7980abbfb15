package ggufgen

// DeepSeek V3 (Ollama's deepseek2 model code): multi-head latent
// attention, whose queries and keys and values each pass through a
// low-rank projection and a norm, a first dense layer and then
// mixture-of-experts layers with a shared expert and a routing bias.
// The keys and values are expanded per head (attn_kv_b), the model
// code's path for files without attn_k_b and attn_v_b.
func init() {
	layouts["deepseek2"] = Layout{
		KV: func(b *Builder) {
			mlaKV(b, "deepseek2", mlaValue)
			b.KV["deepseek2.attention.head_count_kv"] = uint32(b.Shape.Heads)
			b.KV["deepseek2.rope.scaling.factor"] = float32(1)
			b.KV["deepseek2.rope.scaling.yarn_log_multiplier"] = float32(0.1)
			b.KV["deepseek2.rope.scaling.original_context_length"] = uint32(b.Shape.Context)
		},
		Block: func(b *Builder, p string) {
			H := uint64(b.Shape.Heads)
			mlaLatent(b, p)
			b.Add(
				b.Random(p+"attn_kv_b.weight", mlaKVRank, H*(mlaNope+mlaValue)),
				b.Random(p+"attn_output.weight", H*mlaValue, b.E),
			)
			mlaFeedForward(b, p)
		},
	}
}

// The widths of the generated latent-attention models: the query's and
// the key-value's low ranks, a head's unrotated and rotated query/key
// parts and its value; their experts.
const (
	mlaQRank, mlaKVRank         = 32, 32
	mlaNope, mlaRope, mlaValue  = 16, 8, 16
	mlaExperts, mlaExpertsUsed  = 4, 2
	mlaExpertFF, mlaDenseLayers = 32, 1
)

// mlaKV are the keys DeepSeek V3 and GLM-4.7-Flash share, under arch,
// with value the width of a head's value.
func mlaKV(b *Builder, arch string, value uint64) {
	kv := map[string]any{
		"attention.q_lora_rank":      uint32(mlaQRank),
		"attention.kv_lora_rank":     uint32(mlaKVRank),
		"attention.key_length":       uint32(mlaNope + mlaRope),
		"attention.value_length":     uint32(value),
		"rope.dimension_count":       uint32(mlaRope),
		"leading_dense_block_count":  uint32(mlaDenseLayers),
		"expert_count":               uint32(mlaExperts),
		"expert_used_count":          uint32(mlaExpertsUsed),
		"expert_shared_count":        uint32(1),
		"expert_feed_forward_length": uint32(mlaExpertFF),
		"expert_weights_scale":       float32(1),
		"expert_weights_norm":        true,
		"expert_gating_func":         uint32(2), // sigmoid
	}
	for k, v := range kv {
		b.KV[arch+"."+k] = v
	}
}

// mlaLatent adds the start of a latent-attention block: its norm, the
// query's low-rank projection and the shared key-value latent.
func mlaLatent(b *Builder, p string) {
	H := uint64(b.Shape.Heads)
	b.Add(
		b.Ones(p+"attn_norm.weight", b.E),
		b.Random(p+"attn_q_a.weight", b.E, mlaQRank),
		b.Ones(p+"attn_q_a_norm.weight", mlaQRank),
		b.Random(p+"attn_q_b.weight", mlaQRank, H*(mlaNope+mlaRope)),
		b.Random(p+"attn_kv_a_mqa.weight", b.E, mlaKVRank+mlaRope),
		b.Ones(p+"attn_kv_a_norm.weight", mlaKVRank),
	)
}

// mlaFeedForward adds the feed-forward of block p: dense in the leading
// layers, else routed experts beside a shared one.
func mlaFeedForward(b *Builder, p string) {
	E, X := b.E, uint64(mlaExperts)
	b.Add(b.Ones(p+"ffn_norm.weight", E))
	if blockIndex(p) < mlaDenseLayers {
		b.FeedForward(p, b.F)
		return
	}
	b.Add(
		b.Random(p+"ffn_gate_inp.weight", E, X),
		b.Fill(p+"exp_probs_b.bias", 0, X),
		b.Random(p+"ffn_gate_exps.weight", E, mlaExpertFF, X),
		b.Random(p+"ffn_up_exps.weight", E, mlaExpertFF, X),
		b.Random(p+"ffn_down_exps.weight", mlaExpertFF, E, X),
		b.Random(p+"ffn_gate_shexp.weight", E, mlaExpertFF),
		b.Random(p+"ffn_up_shexp.weight", E, mlaExpertFF),
		b.Random(p+"ffn_down_shexp.weight", mlaExpertFF, E),
	)
}
