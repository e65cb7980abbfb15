package ggufgen

// Nemotron-H and Nemotron-H MoE (Nemotron 3) on Ollama's own engine: a
// hybrid of blocks of one kind each, told apart by two per-block arrays
// as the converter writes them from hybrid_override_pattern: a Mamba-2
// block has neither KV heads (attention.head_count_kv) nor a
// feed-forward (feed_forward_length), an attention block (no RoPE) has
// KV heads only, a feed-forward block a feed-forward length only: dense
// with a squared ReLU for nemotron_h, a sigmoid router over experts
// beside a shared expert for nemotron_h_moe. The blocks here are Mamba-2,
// attention, Mamba-2, feed-forward ("M*M-", "M*ME" for MoE).
func init() {
	layouts["nemotron_h"] = nemotronhLayout("nemotron_h", false)
	layouts["nemotron_h_moe"] = nemotronhLayout("nemotron_h_moe", true)
}

// The Mamba-2 blocks' size: heads of mambaHead channels, groups of B and
// C of mambaState each, and the convolution's width.
const (
	mambaHeads  = 8
	mambaHead   = 16
	mambaGroups = 2
	mambaState  = 16
	mambaConv   = 4
)

// nemotronhLayout is the layout of arch, with experts when moe.
func nemotronhLayout(arch string, moe bool) Layout {
	const experts, used = 4, 2
	pattern := "M*M-"
	if moe {
		pattern = "M*ME"
	}
	return Layout{
		Layers: len(pattern),
		KV: func(b *Builder) {
			kvHeads := make([]uint32, b.Shape.Layers)
			ffn := make([]uint32, b.Shape.Layers)
			for i := range kvHeads {
				switch kind(pattern, i) {
				case '*':
					kvHeads[i] = uint32(b.Shape.KVHeads)
				case '-', 'E':
					ffn[i] = uint32(b.F)
				}
			}
			b.KV[arch+".attention.head_count_kv"] = kvHeads
			b.KV[arch+".feed_forward_length"] = ffn
			b.KV[arch+".attention.key_length"] = uint32(b.HeadDim)
			b.KV[arch+".attention.value_length"] = uint32(b.HeadDim)
			b.KV[arch+".attention.layer_norm_epsilon"] = float32(1e-5)
			b.KV[arch+".ssm.conv_kernel"] = uint32(mambaConv)
			b.KV[arch+".ssm.inner_size"] = uint32(mambaHeads * mambaHead)
			b.KV[arch+".ssm.state_size"] = uint32(mambaState)
			b.KV[arch+".ssm.group_count"] = uint32(mambaGroups)
			b.KV[arch+".ssm.time_step_rank"] = uint32(mambaHeads)
			if moe {
				b.KV[arch+".expert_count"] = uint32(experts)
				b.KV[arch+".expert_used_count"] = uint32(used)
				b.KV[arch+".expert_feed_forward_length"] = uint32(b.F)
				b.KV[arch+".expert_shared_count"] = uint32(1)
				b.KV[arch+".expert_shared_feed_forward_length"] = uint32(b.F)
				b.KV[arch+".expert_weights_norm"] = true
				b.KV[arch+".expert_weights_scale"] = float32(2.5)
			}
		},
		Block: func(b *Builder, p string) {
			E, F := b.E, b.F
			b.Add(b.Ones(p+"attn_norm.weight", E))
			switch kind(pattern, blockIndex(p)) {
			case 'M':
				const inner = mambaHeads * mambaHead
				const xBC = inner + 2*mambaGroups*mambaState
				b.Add(
					// z, then x, B and C, then each head's dt.
					b.Random(p+"ssm_in.weight", E, inner+xBC+mambaHeads),
					b.Random(p+"ssm_conv1d.weight", mambaConv, xBC),
					b.Fill(p+"ssm_conv1d.bias", 0, xBC),
					b.Fill(p+"ssm_dt.bias", 0.5, mambaHeads),
					b.Fill(p+"ssm_a", -1, 1, mambaHeads), // -exp(A_log)
					b.Fill(p+"ssm_d", 1, 1, mambaHeads),
					b.Fill(p+"ssm_norm.weight", 1, inner/mambaGroups, mambaGroups),
					b.Random(p+"ssm_out.weight", inner, E),
				)
			case '*':
				b.Attention(p)
			case '-':
				b.Add(
					b.Random(p+"ffn_up.weight", E, F),
					b.Random(p+"ffn_down.weight", F, E),
				)
			case 'E':
				b.Add(
					b.Random(p+"ffn_gate_inp.weight", E, experts),
					b.Fill(p+"exp_probs_b.bias", 0, experts),
					b.Random(p+"ffn_up_exps.weight", E, F, experts),
					b.Random(p+"ffn_down_exps.weight", F, E, experts),
					b.Random(p+"ffn_up_shexp.weight", E, F),
					b.Random(p+"ffn_down_shexp.weight", F, E),
				)
			}
		},
	}
}

// kind is block i's letter in a hybrid_override_pattern, repeated for
// blocks past its end.
func kind(pattern string, i int) byte { return pattern[i%len(pattern)] }
