package ggufgen

import (
	"fmt"
	"math/rand/v2"

	"github.com/ollama/ollama/fs/ggml"
)

// Builder is a model being written: its shape, its GGUF keys and its
// tensors so far. An architecture's Layout adds the keys and the tensors
// of each block its model code loads; the embedding, the final norm and
// the output projection are common to all and written before.
type Builder struct {
	Shape   Shape
	KV      ggml.KV
	Tensors []*ggml.Tensor
	// E is the embedding width, F the feed-forward width, HeadDim the
	// width of one attention head, Q that of the queries (HeadDim times
	// the heads: E unless the layout sets its HeadDim) and K that of the
	// keys (HeadDim times the KV heads).
	E, F, HeadDim, Q, K uint64
	rng                 *rand.Rand
}

// Layout is what an architecture adds: keys under its name (KV, may be
// nil), the tensors of one block, whose names start with prefix
// ("blk.N."), and, for an architecture with a vision tower (Vision, nil
// for the others), the tower's and the projector's keys and tensors,
// written when Shape.Vision asks for them. Layers, when more than the
// shape's, is the block count the architecture needs to have one block
// of each kind. HeadDim, when set, is the width of an attention head (and
// rope.dimension_count) in place of the embedding over the heads.
type Layout struct {
	KV      func(b *Builder)
	Block   func(b *Builder, prefix string)
	Vision  func(b *Builder) error
	Layers  int
	HeadDim int
}

// layouts are the architectures Write knows, by general.architecture.
var layouts = map[string]Layout{
	"llama": {Block: llamaBlock},
	"qwen3": {
		KV: func(b *Builder) {
			b.KV["qwen3.attention.key_length"] = uint32(b.HeadDim)
			b.KV["qwen3.attention.value_length"] = uint32(b.HeadDim)
		},
		Block: func(b *Builder, p string) {
			llamaBlock(b, p)
			b.Add(b.Ones(p+"attn_q_norm.weight", b.HeadDim), b.Ones(p+"attn_k_norm.weight", b.HeadDim))
		},
	},
}

// llamaBlock adds a Llama block: attention with grouped KV heads and a
// gated feed-forward, each after an RMS norm.
func llamaBlock(b *Builder, p string) {
	F := b.F
	normedAttention(b, p)
	b.FeedForward(p, F)
}

// normedAttention adds a Llama block without its feed-forward: the
// attention's norm, the attention, the feed-forward's norm.
func normedAttention(b *Builder, p string) {
	b.Add(b.Ones(p+"attn_norm.weight", b.E))
	b.Attention(p)
	b.Add(b.Ones(p+"ffn_norm.weight", b.E))
}

// Attention adds attention with grouped KV heads: attn_q, attn_k, attn_v
// and attn_output.
func (b *Builder) Attention(p string) {
	b.Add(b.Random(p+"attn_q.weight", b.E, b.Q), b.Random(p+"attn_k.weight", b.E, b.K),
		b.Random(p+"attn_v.weight", b.E, b.K), b.Random(p+"attn_output.weight", b.Q, b.E))
}

// FeedForward adds a gated feed-forward of width f: ffn_gate, ffn_up and
// ffn_down.
func (b *Builder) FeedForward(p string, f uint64) {
	b.Add(b.Random(p+"ffn_gate.weight", b.E, f), b.Random(p+"ffn_up.weight", b.E, f), b.Random(p+"ffn_down.weight", f, b.E))
}

// Experts adds n experts of width f behind a router: ffn_gate_inp, then
// the gate, up and down tensors of all experts.
func (b *Builder) Experts(p string, n, f uint64) {
	b.Add(b.Random(p+"ffn_gate_inp.weight", b.E, n), b.Random(p+"ffn_gate_exps.weight", b.E, f, n),
		b.Random(p+"ffn_up_exps.weight", b.E, f, n), b.Random(p+"ffn_down_exps.weight", f, b.E, n))
}

// SharedExpert adds the expert every token passes besides the routed
// ones: ffn_gate_shexp, ffn_up_shexp and ffn_down_shexp of width f.
func (b *Builder) SharedExpert(p string, f uint64) {
	b.Add(b.Random(p+"ffn_gate_shexp.weight", b.E, f), b.Random(p+"ffn_up_shexp.weight", b.E, f),
		b.Random(p+"ffn_down_shexp.weight", f, b.E))
}

// blockIndex returns N of a block prefix "blk.N.".
func blockIndex(p string) int {
	var i int
	if _, err := fmt.Sscanf(p, "blk.%d.", &i); err != nil {
		panic("ggufgen: block prefix " + p)
	}
	return i
}

// KVHeads returns the per-block attention.head_count_kv of a hybrid
// model: the shape's KV heads where attention(i), 0 (another kind of
// block) elsewhere.
func (b *Builder) KVHeads(attention func(i int) bool) []uint32 {
	heads := make([]uint32, b.Shape.Layers)
	for i := range heads {
		if attention(i) {
			heads[i] = uint32(b.Shape.KVHeads)
		}
	}
	return heads
}

// Rename renames the tensor called from, one of those so far.
func (b *Builder) Rename(from, to string) {
	for _, t := range b.Tensors {
		if t.Name == from {
			t.Name = to
			return
		}
	}
	panic("ggufgen: no tensor " + from)
}

// Add appends tensors to the model.
func (b *Builder) Add(ts ...*ggml.Tensor) { b.Tensors = append(b.Tensors, ts...) }

// Random returns an F32 tensor of the given shape (GGUF order: the
// fastest-moving dimension first) with small random values.
func (b *Builder) Random(name string, shape ...uint64) *ggml.Tensor {
	n := uint64(1)
	for _, d := range shape {
		n *= d
	}
	d := make(f32, n)
	for i := range d {
		d[i] = float32(b.rng.NormFloat64() * 0.02)
	}
	return &ggml.Tensor{Name: name, Kind: 0, Shape: shape, WriterTo: d}
}

// RandomF16 is Random in F16, for a tensor a reader takes in that type
// only.
func (b *Builder) RandomF16(name string, shape ...uint64) *ggml.Tensor {
	t := b.Random(name, shape...)
	d := t.WriterTo.(f32)
	h := make(f16, len(d))
	for i, v := range d {
		h[i] = halfBits(v)
	}
	t.Kind, t.WriterTo = 1, h
	return t
}

// Ones returns an F32 vector of n ones (a norm's weight).
func (b *Builder) Ones(name string, n uint64) *ggml.Tensor {
	return b.Fill(name, 1, n)
}

// Fill returns an F32 tensor of the given shape with every value v.
func (b *Builder) Fill(name string, v float32, shape ...uint64) *ggml.Tensor {
	n := uint64(1)
	for _, d := range shape {
		n *= d
	}
	d := make(f32, n)
	for i := range d {
		d[i] = v
	}
	return &ggml.Tensor{Name: name, Kind: 0, Shape: shape, WriterTo: d}
}
