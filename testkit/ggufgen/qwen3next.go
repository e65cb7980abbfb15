package ggufgen

import (
	"fmt"
	"slices"
)

// Qwen3-Next and Qwen 3.5 on Ollama's own engine (one model code,
// qwen3next, for qwen3next, qwen35 and qwen35moe): a hybrid whose blocks
// are either a gated delta-net (linear attention; a block with no KV
// heads in the per-block attention.head_count_kv) or gated attention,
// whose query projection also yields a sigmoid gate for its output.
// Every full_attention_interval-th block is attention, as the converter
// writes it: with an interval of 2, block 0 is a delta-net and block 1
// attention. Each block ends in a feed-forward after a post-attention
// norm: Qwen3-Next's and Qwen 3.5 MoE's a router over experts beside a
// gated shared expert, Qwen 3.5's a gated dense one.
//
// Qwen3-Next packs the delta-net's beta and alpha projections into one
// tensor (ssm_ba); Qwen 3.5 has them apart (ssm_beta, ssm_alpha), its
// value heads in the tiled order (ssm.v_head_reordered) and an
// interleaved multi-axis RoPE.
//
// The model code builds Qwen 3 VL's vision tower when
// vision.block_count is above 0; the text-only file has no such key.
// Shape.Vision adds the tower (qwen3nextVision).
func init() {
	layouts["qwen3next"] = qwen3nextLayout("qwen3next", true, false)
	layouts["qwen35"] = qwen3nextLayout("qwen35", false, true)
	layouts["qwen35moe"] = qwen3nextLayout("qwen35moe", true, true)
}

// The delta-net's size: key heads of headK, value heads of the same
// width (the model code requires it), and the convolution's width.
const (
	gdnKeyHeads   = 2
	gdnValueHeads = 4
	gdnHead       = 16
	gdnConv       = 4
	gdnInterval   = 2
)

// qwen3nextLayout is the layout of arch: sparse with experts (moe), and
// with Qwen 3.5's delta-net projections and RoPE (qwen35) or
// Qwen3-Next's.
func qwen3nextLayout(arch string, moe, qwen35 bool) Layout {
	const experts, used = 4, 2
	recurrent := func(i int) bool { return (i+1)%gdnInterval != 0 }
	return Layout{
		Vision: func(b *Builder) error { return qwen3nextVision(b, arch) },
		KV: func(b *Builder) {
			b.KV[arch+".attention.head_count_kv"] = b.KVHeads(func(i int) bool { return !recurrent(i) })
			b.KV[arch+".attention.key_length"] = uint32(b.HeadDim)
			b.KV[arch+".attention.value_length"] = uint32(b.HeadDim)
			// Partial RoPE: half of each head rotates.
			b.KV[arch+".rope.dimension_count"] = uint32(b.HeadDim / 2)
			b.KV[arch+".full_attention_interval"] = uint32(gdnInterval)
			b.KV[arch+".ssm.inner_size"] = uint32(gdnHead * gdnValueHeads)
			b.KV[arch+".ssm.state_size"] = uint32(gdnHead)
			b.KV[arch+".ssm.group_count"] = uint32(gdnKeyHeads)
			b.KV[arch+".ssm.time_step_rank"] = uint32(gdnValueHeads)
			b.KV[arch+".ssm.conv_kernel"] = uint32(gdnConv)
			if qwen35 {
				b.KV[arch+".ssm.v_head_reordered"] = true
				// Sections of the rotated pairs (HeadDim/4 of them):
				// time, height, width.
				sections := []int32{2, 1, 1}
				b.KV[arch+".mrope_sections"] = sections
				b.KV[arch+".rope.mrope_section"] = sections
				b.KV[arch+".rope.dimension_sections"] = sections
				b.KV[arch+".rope.mrope_interleaved"] = true
			}
			if moe {
				b.KV[arch+".expert_count"] = uint32(experts)
				b.KV[arch+".expert_used_count"] = uint32(used)
				b.KV[arch+".norm_top_k_prob"] = true
				b.KV[arch+".expert_feed_forward_length"] = uint32(b.F)
				b.KV[arch+".expert_shared_feed_forward_length"] = uint32(b.F)
			}
		},
		Block: func(b *Builder, p string) {
			E, F, K := b.E, b.F, b.K
			b.Add(b.Ones(p+"attn_norm.weight", E))
			if recurrent(blockIndex(p)) {
				const inner = gdnHead * gdnValueHeads
				const qkv = 2*gdnHead*gdnKeyHeads + inner
				b.Add(
					b.Random(p+"attn_qkv.weight", E, qkv),
					b.Random(p+"attn_gate.weight", E, inner),
					b.Random(p+"ssm_conv1d.weight", gdnConv, qkv),
					b.Fill(p+"ssm_dt", 0.5, gdnValueHeads),
					b.Fill(p+"ssm_a", -1, gdnValueHeads), // -exp(A_log)
					b.Ones(p+"ssm_norm.weight", gdnHead),
					b.Random(p+"ssm_out.weight", inner, E),
				)
				if qwen35 {
					b.Add(
						b.Random(p+"ssm_beta.weight", E, gdnValueHeads),
						b.Random(p+"ssm_alpha.weight", E, gdnValueHeads),
					)
				} else {
					b.Add(b.Random(p+"ssm_ba.weight", E, 2*gdnValueHeads))
				}
			} else {
				b.Add(
					// Each head's query, then its gate.
					b.Random(p+"attn_q.weight", E, 2*E),
					b.Ones(p+"attn_q_norm.weight", b.HeadDim),
					b.Random(p+"attn_k.weight", E, K),
					b.Ones(p+"attn_k_norm.weight", b.HeadDim),
					b.Random(p+"attn_v.weight", E, K),
					b.Random(p+"attn_output.weight", E, E),
				)
			}
			b.Add(b.Ones(p+"post_attention_norm.weight", E))
			if !moe {
				b.FeedForward(p, F)
				return
			}
			b.Experts(p, experts, F)
			b.Add(b.Random(p+"ffn_gate_inp_shexp.weight", E, 1))
			b.SharedExpert(p, F)
		},
	}
}

// qwen3nextVision adds Qwen 3 VL's vision tower (qwen3vlVision) to a
// Qwen3-Next or Qwen 3.5 model. Its model code reads the ids of the
// image's tokens from keys (image_token_id, vision_start_token_id,
// vision_end_token_id; model/models/qwen3next/model.go): they are set to
// the vocabulary's <|image_pad|>, <|vision_start|> and <|vision_end|>,
// which it must hold.
func qwen3nextVision(b *Builder, arch string) error {
	toks, _ := b.KV["tokenizer.ggml.tokens"].([]string)
	// In this order, so that a vocabulary without them is refused for
	// <|image_pad|> first, every time.
	for _, m := range [][2]string{
		{"image_token_id", "<|image_pad|>"},
		{"vision_start_token_id", "<|vision_start|>"},
		{"vision_end_token_id", "<|vision_end|>"},
	} {
		key, tok := m[0], m[1]
		id := slices.Index(toks, tok)
		if id < 0 {
			return fmt.Errorf("ggufgen: a %s vision model needs %s in its vocabulary", arch, tok)
		}
		b.KV[arch+"."+key] = uint32(id)
	}
	qwen3vlVision(b, arch)
	return nil
}
