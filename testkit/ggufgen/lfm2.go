package ggufgen

// lfm2 is LFM2 on Ollama's own engine: a hybrid whose blocks are either
// a short convolution (a block with no KV heads in the per-block
// attention.head_count_kv) or attention with a norm of the queries and
// keys, each followed by a gated feed-forward. Even blocks here are
// convolutions, odd ones attention, as LFM2 starts with convolutions.
func init() {
	const lCache = 3 // the convolution's width
	conv := func(i int) bool { return i%2 == 0 }
	layouts["lfm2"] = Layout{
		KV: func(b *Builder) {
			kvHeads := make([]uint32, b.Shape.Layers)
			for i := range kvHeads {
				if !conv(i) {
					kvHeads[i] = uint32(b.Shape.KVHeads)
				}
			}
			b.KV["lfm2.attention.head_count_kv"] = kvHeads
			b.KV["lfm2.attention.key_length"] = uint32(b.HeadDim)
			b.KV["lfm2.attention.value_length"] = uint32(b.HeadDim)
			b.KV["lfm2.shortconv.l_cache"] = uint32(lCache)
		},
		Block: func(b *Builder, p string) {
			E, F, K := b.E, b.F, b.K
			b.Add(b.Ones(p+"attn_norm.weight", E))
			if conv(blockIndex(p)) {
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
			b.Add(
				b.Ones(p+"ffn_norm.weight", E),
			)
			b.FeedForward(p, F)
		},
	}
}
