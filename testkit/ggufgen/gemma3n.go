package ggufgen

// gemma3n is Gemma 3n's text model as Ollama's own engine loads it
// (model/models/gemma3n). Each block holds Gemma 3's attention (a norm of
// the queries and keys of each head, norms after attention and after the
// feed-forward) and, around it:
//   - AltUp: the hidden state runs as altup.num_inputs (4) streams; a
//     router over the active one predicts all streams before the block
//     and corrects them after (altup_*), and a projection of the
//     embedding makes the other streams at the start (altup_proj, one
//     E×E matrix per stream but the first, as one tensor) and merges them
//     back at the end (altup_unembd_proj);
//   - per-layer embeddings: every token has an embedding of
//     embedding_length_per_layer_input (P) per layer
//     (per_layer_token_embd), added to a projection of the main one
//     (per_layer_model_proj, per_layer_proj_norm) and gated into each
//     block's output (inp_gate, proj, post_norm);
//   - Laurel: a low-rank residual beside attention (laurel_l, laurel_r,
//     laurel_post_norm).
//
// The first layer uses a sliding window, the second is global, and the
// first's feed-forward is sparse (activation_sparsity_scale, Gemma 3n's
// 0.95 quantile); no layer shares another's keys and values
// (attention.shared_kv_layers 0), which would need more layers. Gemma
// 3n's converter writes no vision or audio tower, and Ollama has none.
//
// The per-layer embedding is 256 wide and Laurel's rank 64, Gemma 3n's
// own: llama.cpp (llama-server, Ollama 0.30 and later) fixes both (and
// the 4 streams) in its code rather than reading the keys.
func init() {
	const streams, perLayer, rank = 4, 256, 64
	layouts["gemma3n"] = Layout{
		KV: func(b *Builder) {
			L := uint64(b.Shape.Layers)
			b.KV["gemma3n.head_dim"] = uint32(b.HeadDim)
			b.KV["gemma3n.embedding_length_per_layer_input"] = uint32(perLayer)
			b.KV["gemma3n.altup.active_idx"] = uint32(0)
			b.KV["gemma3n.altup.num_inputs"] = uint32(streams)
			b.KV["gemma3n.altup.correct_scale"] = true
			b.KV["gemma3n.altup.lr_multiplier"] = float32(1)
			b.KV["gemma3n.attention.shared_kv_layers"] = uint32(0)
			b.KV["gemma3n.attention.sliding_window"] = uint32(512)
			b.KV["gemma3n.attention.layer_norm_rms_epsilon"] = float32(1e-6)
			b.KV["gemma3n.rope.freq_base"] = float32(1_000_000)
			b.KV["gemma3n.rope.freq_base_local"] = float32(10_000)
			window := make([]bool, L)
			sparsity := make([]float32, L)
			for i := range window {
				// Gemma 3n's pattern: four local layers, then a global one.
				window[i] = i%5 != 4 && i != int(L)-1
			}
			sparsity[0] = 1.6448536 // the normal distribution's 0.95 quantile
			b.KV["gemma3n.attention.sliding_window_pattern"] = window
			b.KV["gemma3n.activation_sparsity_scale"] = sparsity
			// token_embd, written first, is {E, V}.
			E, V := b.E, b.Tensors[0].Shape[1]
			b.Add(
				b.Random("per_layer_token_embd.weight", perLayer*L, V),
				b.Random("per_layer_model_proj.weight", E, perLayer*L),
				b.Ones("per_layer_proj_norm.weight", perLayer),
				b.Random("altup_proj.weight", E, E, streams-1),
				b.Random("altup_unembd_proj.weight", E, E, streams-1),
			)
		},
		Block: func(b *Builder, p string) {
			E := b.E
			llamaBlock(b, p)
			b.Add(
				b.Ones(p+"attn_q_norm.weight", b.HeadDim),
				b.Ones(p+"attn_k_norm.weight", b.HeadDim),
				b.Ones(p+"post_attention_norm.weight", E),
				b.Ones(p+"post_ffw_norm.weight", E),
				b.Ones(p+"altup_correct_scale.weight", E),
				b.Random(p+"altup_predict_coef.weight", streams, streams*streams),
				b.Random(p+"altup_correct_coef.weight", streams, streams),
				b.Random(p+"altup_router.weight", E, streams),
				b.Ones(p+"altup_router_norm.weight", E),
				b.Random(p+"laurel_l.weight", E, rank),
				b.Random(p+"laurel_r.weight", rank, E),
				b.Ones(p+"laurel_post_norm.weight", E),
				b.Random(p+"inp_gate.weight", E, perLayer),
				b.Random(p+"proj.weight", perLayer, E),
				b.Ones(p+"post_norm.weight", E),
			)
		},
	}
}
