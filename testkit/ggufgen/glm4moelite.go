package ggufgen

// GLM-4.7-Flash (Ollama's glm4moelite model code): DeepSeek V3's
// latent attention in its absorbed form, the key and value expansions
// per head (attn_k_b, attn_v_b) applied to the query and to the
// attention's output, and DeepSeek V3's feed-forward. A head's value is
// as wide as its query and key (glmValue), as in GLM-4.7-Flash (192
// unrotated and 64 rotated, values of 256): llama-server (Ollama 0.30
// and later) loads a published file, recognized by general.architecture
// glm4moelite, as deepseek2 through Ollama's compatibility layer, which
// takes the per-head key length for the value's too.
const glmValue = mlaNope + mlaRope

func init() {
	layouts["glm4moelite"] = Layout{
		KV: func(b *Builder) {
			mlaKV(b, "glm4moelite", glmValue)
			b.KV["glm4moelite.attention.head_count_kv"] = uint32(b.Shape.Heads)
			b.KV["glm4moelite.attention.key_length_mla"] = uint32(mlaKVRank + mlaRope)
			b.KV["glm4moelite.attention.value_length_mla"] = uint32(mlaKVRank)
		},
		Block: func(b *Builder, p string) {
			H := uint64(b.Shape.Heads)
			mlaLatent(b, p)
			b.Add(
				b.Random(p+"attn_k_b.weight", mlaNope, mlaKVRank, H),
				b.Random(p+"attn_v_b.weight", mlaKVRank, glmValue, H),
				b.Random(p+"attn_output.weight", H*glmValue, b.E),
			)
			mlaFeedForward(b, p)
		},
	}
}
