package ggufgen

// lfm2 is LFM2 on Ollama's own engine: a hybrid whose blocks are either
// a short convolution (a block with no KV heads in the per-block
// attention.head_count_kv) or attention with a norm of the queries and
// keys, each followed by a gated feed-forward. Even blocks here are
// convolutions, odd ones attention, as LFM2 starts with convolutions.
// lfm2moe is the same with routed experts in place of the feed-forward
// after the first block (leading_dense_block_count), sigmoid gating and a
// routing bias, as LFM2's MoE models have them.
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
	}
}
