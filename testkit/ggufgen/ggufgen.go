// Package ggufgen writes small random-weight GGUF models, of the
// architectures in layouts, around a generated vocabulary (package vocabgen), with Ollama's
// own GGUF writer, so the end-to-end suite can load models whose
// tokenizer is large enough to tell a real tokenizer from a guess into a
// real Ollama. The weights are random: the text a model writes is
// printable noise, for testing plumbing, never answers.
package ggufgen

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/fs/ggml"
)

// Shape is the model's size. The zero value is 2 layers, embedding 64,
// 4 heads, 2 KV heads, feed-forward 128 and an 8192-token window.
type Shape struct {
	Layers, Embedding, Heads, KVHeads, FeedForward, Context int
	Seed                                                    uint64
	// Arch is the architecture, one of layouts: "llama" (the default,
	// which Ollama runs on llama.cpp's runner), "qwen3" (Ollama's own
	// engine: llama's tensors plus a norm of the queries and keys), ….
	Arch string
	// Vision adds the architecture's vision tower and projector, tiny
	// but whole enough for Ollama to encode images with (only layouts
	// with a Vision part have one: the families whose image costs the
	// e2e suite checks). Off, the file is the text model alone, the same
	// bytes as before the layout had a Vision part.
	Vision bool
	// Answer, when set, makes the model answer every prompt with this
	// one token of the vocabulary (a normal token), then its
	// end-of-sequence token: a reply that ends on its own, as a coding
	// agent expects of a model (one stopped by its output limit is an
	// error to some). Unset, replies are printable noise that the
	// Modelfile's num_predict ends, the same bytes as before.
	Answer string
}

func (s Shape) withDefaults() Shape {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&s.Layers, 2)
	def(&s.Embedding, 64)
	def(&s.Heads, 4)
	def(&s.KVHeads, 2)
	def(&s.FeedForward, 128)
	def(&s.Context, 8192)
	if s.Arch == "" {
		s.Arch = "llama"
	}
	return s
}

type f32 []float32

func (d f32) WriteTo(w io.Writer) (int64, error) {
	if err := binary.Write(w, binary.LittleEndian, []float32(d)); err != nil {
		return 0, err
	}
	return int64(len(d) * 4), nil
}

type f16 []uint16

func (d f16) WriteTo(w io.Writer) (int64, error) {
	if err := binary.Write(w, binary.LittleEndian, []uint16(d)); err != nil {
		return 0, err
	}
	return int64(len(d) * 2), nil
}

// halfBits returns the IEEE 754 half-precision bits nearest f (ties to
// even), ±Inf past its range.
func halfBits(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	round := func(v, rem, halfway uint32) uint32 {
		if rem > halfway || rem == halfway && v&1 == 1 {
			v++
		}
		return v
	}
	switch {
	case exp >= 31:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint(14 - exp)
		return sign | uint16(round(mant>>shift, mant&(1<<shift-1), 1<<(shift-1)))
	}
	return sign | uint16(round(uint32(exp)<<10|mant>>13, mant&0x1fff, 0x1000))
}

// Write writes a GGUF model of shape s with vocabulary v to path.
func Write(path string, v vocabgen.Vocab, s Shape) error {
	s = s.withDefaults()
	layout, ok := layouts[s.Arch]
	if !ok {
		return fmt.Errorf("ggufgen: no layout for architecture %q", s.Arch)
	}
	s.Layers = max(s.Layers, layout.Layers)
	rng := rand.New(rand.NewPCG(s.Seed, 17))
	nVocab := len(v.Tokens)
	headDim := s.Embedding / s.Heads
	if layout.HeadDim > 0 {
		headDim = layout.HeadDim
	}
	kv := ggml.KV{
		"general.architecture":                       s.Arch,
		"general.name":                               "ctxproxy-generated",
		"general.file_type":                          uint32(0), // all F32
		"general.alignment":                          uint32(32),
		s.Arch + ".context_length":                   uint32(s.Context),
		s.Arch + ".embedding_length":                 uint32(s.Embedding),
		s.Arch + ".block_count":                      uint32(s.Layers),
		s.Arch + ".feed_forward_length":              uint32(s.FeedForward),
		s.Arch + ".attention.head_count":             uint32(s.Heads),
		s.Arch + ".attention.head_count_kv":          uint32(s.KVHeads),
		s.Arch + ".rope.dimension_count":             uint32(headDim),
		s.Arch + ".rope.freq_base":                   float32(10000),
		s.Arch + ".attention.layer_norm_rms_epsilon": float32(1e-5),
		s.Arch + ".vocab_size":                       uint32(nVocab),
		"tokenizer.ggml.model":                       v.Model,
		"tokenizer.ggml.tokens":                      v.Tokens,
		"tokenizer.ggml.token_type":                  v.Types,
		"tokenizer.ggml.bos_token_id":                uint32(v.BOS),
		"tokenizer.ggml.eos_token_id":                uint32(v.EOS),
		"tokenizer.ggml.add_bos_token":               v.AddBOS,
		"tokenizer.ggml.add_eos_token":               false,
	}
	if v.NoAddBOSKey {
		delete(kv, "tokenizer.ggml.add_bos_token")
	}
	if v.Model == "gpt2" {
		kv["tokenizer.ggml.pre"] = v.Pre
		kv["tokenizer.ggml.merges"] = v.Merges
	} else {
		kv["tokenizer.ggml.scores"] = v.Scores
	}
	// Printable tokens get a high output logit and everything else
	// (bytes outside printable ASCII, control tokens) a very low one, so
	// sampling writes printable text and never stops on its own: the
	// Modelfile's num_predict ends each reply.
	printable := func(id int) bool {
		switch {
		case v.Types[id] != vocabgen.TypeNormal:
			return false
		case v.Model == "gpt2" && id < 256:
			return id >= 0x20 && id <= 0x7e
		}
		return true
	}
	b := &Builder{Shape: s, KV: kv, rng: rng, HeadDim: uint64(headDim),
		E: uint64(s.Embedding), F: uint64(s.FeedForward), Q: uint64(headDim * s.Heads), K: uint64(headDim * s.KVHeads)}
	E, V := b.E, uint64(nVocab)
	emb, out := make(f32, E*V), make(f32, E*V)
	for t := range V {
		for e := range E {
			emb[t*E+e] = float32(rng.NormFloat64() * 0.05)
			out[t*E+e] = float32(rng.NormFloat64() * 0.5)
		}
		// Dimension 0 dominates after the final norm, so row 0 of the
		// output decides which tokens can be sampled.
		emb[t*E] = 1
		out[t*E] = -5
		if printable(int(t)) {
			out[t*E] = float32(1 + rng.NormFloat64()*0.05)
		}
	}
	if s.Answer != "" {
		// Dimension 1 marks the answer token: after any other token,
		// dimension 0 dominates and the answer's row wins; after the
		// answer, dimension 1 does and the end-of-sequence row wins.
		a := slices.Index(v.Tokens, s.Answer)
		if a < 0 || v.Types[a] != vocabgen.TypeNormal {
			return fmt.Errorf("ggufgen: the answer %q is not a normal token of the vocabulary", s.Answer)
		}
		A, end := uint64(a), uint64(v.EOS)
		emb[A*E], emb[A*E+1] = 0, 1
		out[A*E], out[A*E+1] = 8, -8
		out[end*E+1] = 8
	}
	b.Tensors = []*ggml.Tensor{
		{Name: "token_embd.weight", Kind: 0, Shape: []uint64{E, V}, WriterTo: emb},
		b.Ones("output_norm.weight", E),
		{Name: "output.weight", Kind: 0, Shape: []uint64{E, V}, WriterTo: out},
	}
	if layout.KV != nil {
		layout.KV(b)
	}
	for i := range s.Layers {
		layout.Block(b, fmt.Sprintf("blk.%d.", i))
	}
	if s.Vision {
		if layout.Vision == nil {
			return fmt.Errorf("ggufgen: architecture %q has no vision tower", s.Arch)
		}
		if err := layout.Vision(b); err != nil {
			return err
		}
	}
	ts := b.Tensors
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := ggml.WriteGGUF(f, kv, ts); err != nil {
		f.Close()
		return fmt.Errorf("ggufgen: %w", err)
	}
	return f.Close()
}
