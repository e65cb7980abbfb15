package ggufgen

// olmo3 is OLMo 3 as Ollama's own engine loads it (model/models/olmo3):
// no norm before attention or the feed-forward but one after each, the
// queries and keys normed across all heads at once, and a sliding window
// on three layers of four (the last of every four is global; the
// pattern, one flag per layer, is required).
func init() {
	layouts["olmo3"] = Layout{
		KV: func(b *Builder) {
			pattern := make([]bool, b.Shape.Layers)
			for i := range pattern {
				pattern[i] = (i+1)%4 != 0 && i != len(pattern)-1
			}
			b.KV["olmo3.attention.sliding_window"] = uint32(512)
			b.KV["olmo3.attention.sliding_window_pattern"] = pattern
		},
		Block: func(b *Builder, p string) {
			E, F, K := b.E, b.F, b.K
			b.Attention(p)
			b.Add(
				b.Ones(p+"attn_q_norm.weight", E),
				b.Ones(p+"attn_k_norm.weight", K),
				b.Ones(p+"post_attention_norm.weight", E),
			)
			b.FeedForward(p, F)
			b.Add(
				b.Ones(p+"post_ffw_norm.weight", E),
			)
		},
	}
}
