package ggufgen

import "fmt"

// qwen3vl and qwen3vlmoe are Qwen 3 VL's text models on Ollama's own
// engine (model/models/qwen3vl, one code for both): Qwen 3's blocks
// (qwen3vl) or Qwen 3 MoE's (qwen3vlmoe, sparse for an architecture
// ending in "moe"), with interleaved multimodal rotary positions in
// sections of the head's half. Ollama reads them from mrope_sections;
// its converter writes rope.mrope_section instead, so a converted file
// gets the default 24/20/20, made for a 128-wide head: the generated
// heads are 128 wide as Qwen 3 VL's, and the file leaves the sections out
// as a converted one does. llama-server (Ollama 0.30 and later) loads a
// published file, one without rope.dimension_sections, through Ollama's
// compatibility layer, which sets those to 24/20/20 whatever the head:
// narrower heads than the sections' 64 pairs fail its rope
// (GGML_ASSERT(sect_dims <= ne0)). The vision tower is left out, with
// vision.block_count 0: Ollama builds the tower from that key (32 blocks
// by default) and encodes a blank image with it when it loads the model,
// unless it has no blocks. Shape.Vision adds a tiny one (qwen3vlVision).
const qwen3vlHeadDim = 128

func init() {
	kv := func(arch string) func(b *Builder) {
		return func(b *Builder) {
			b.KV[arch+".attention.key_length"] = uint32(b.HeadDim)
			b.KV[arch+".attention.value_length"] = uint32(b.HeadDim)
			b.KV[arch+".vision.block_count"] = uint32(0)
		}
	}
	// Looked up when a model is written, as init order between files is
	// not to be relied on.
	layouts["qwen3vl"] = Layout{
		KV:      kv("qwen3vl"),
		Block:   func(b *Builder, p string) { layouts["qwen3"].Block(b, p) },
		Vision:  qwen3vlFixedIDs("qwen3vl"),
		HeadDim: qwen3vlHeadDim,
	}
	layouts["qwen3vlmoe"] = Layout{
		KV: func(b *Builder) {
			kv("qwen3vlmoe")(b)
			// qwen3moe's experts: 4, 2 used per token.
			b.KV["qwen3vlmoe.expert_count"] = uint32(4)
			b.KV["qwen3vlmoe.expert_used_count"] = uint32(2)
			b.KV["qwen3vlmoe.expert_feed_forward_length"] = uint32(b.F)
		},
		Block:   func(b *Builder, p string) { layouts["qwen3moe"].Block(b, p) },
		Vision:  qwen3vlFixedIDs("qwen3vlmoe"),
		HeadDim: qwen3vlHeadDim,
	}
}

// The tiny vision tower of a generated Qwen 3 VL (and Qwen3-Next or
// Qwen 3.5): Qwen 3 VL's 16-pixel patches over two frames, merged 2×2
// into one embedding per 32×32 pixels of the resized image, one encoder
// block 32 wide with 2 heads, and a learned position grid of 4×4 that
// Ollama interpolates to the image's patches.
const (
	qwen3vlPatchSize    = 16
	qwen3vlMergeSize    = 2
	qwen3vlVisionWidth  = 32
	qwen3vlVisionFF     = 64
	qwen3vlVisionHeads  = 2
	qwen3vlVisionBlocks = 1
	qwen3vlPositions    = 16
	// Qwen3VLShortestEdge is the generated model's vision.shortest_edge:
	// the fewest pixels Ollama's processor resizes an image to. Half of
	// the 65,536 real models have (and Ollama's default), so a test tells
	// a count that reads the key from one that assumes the default.
	Qwen3VLShortestEdge = 32 << 10
	// Qwen3VLFactor is the side in pixels of the square of a resized
	// image that becomes one token: patch size × merge size.
	Qwen3VLFactor = qwen3vlPatchSize * qwen3vlMergeSize
	// qwen3vlImagePad is the highest token id Ollama's Qwen 3 VL model
	// code puts into a prompt with an image, by number (its PostTokenize:
	// 151652 <|vision_start|>, 151655 <|image_pad|> for each embedding,
	// 151653 <|vision_end|>): the text model looks each up in its
	// embedding, so the vocabulary must hold it.
	qwen3vlImagePad = 151655
)

// qwen3vlFixedIDs is qwen3vlVision for Qwen 3 VL's model code, which
// writes the image's tokens by fixed ids: the vocabulary must reach
// qwen3vlImagePad.
func qwen3vlFixedIDs(arch string) func(b *Builder) error {
	return func(b *Builder) error {
		toks, _ := b.KV["tokenizer.ggml.tokens"].([]string)
		if n := len(toks); n <= qwen3vlImagePad {
			return fmt.Errorf("ggufgen: a Qwen 3 VL vision model needs a vocabulary of more than %d tokens (its image tokens have fixed ids), not %d", qwen3vlImagePad, n)
		}
		qwen3vlVision(b, arch)
		return nil
	}
}

// qwen3vlVision adds Qwen 3 VL's vision tower and patch merger ("v.")
// as Ollama's model code loads them (model/models/qwen3vl/
// model_vision.go), with the <arch>.vision.* keys its converter writes
// (convert/convert_qwen3vl.go) and its model code reads. The merger
// projects to the text model's width; no deepstack mergers.
func qwen3vlVision(b *Builder, arch string) {
	const (
		H, F = qwen3vlVisionWidth, qwen3vlVisionFF
		P    = qwen3vlPatchSize
		M    = qwen3vlMergeSize * qwen3vlMergeSize * H
	)
	v := arch + ".vision."
	b.KV[v+"block_count"] = uint32(qwen3vlVisionBlocks)
	b.KV[v+"embedding_length"] = uint32(H)
	b.KV[v+"attention.head_count"] = uint32(qwen3vlVisionHeads)
	b.KV[v+"num_channels"] = uint32(3)
	b.KV[v+"patch_size"] = uint32(P)
	b.KV[v+"spatial_merge_size"] = uint32(qwen3vlMergeSize)
	b.KV[v+"temporal_patch_size"] = uint32(2)
	b.KV[v+"attention.layer_norm_epsilon"] = float32(1e-6)
	b.KV[v+"rope.freq_base"] = float32(10000)
	b.KV[v+"num_positional_embeddings"] = uint32(qwen3vlPositions)
	b.KV[v+"shortest_edge"] = uint32(Qwen3VLShortestEdge)
	// As converted from Qwen 3 VL; Ollama's processor ignores it (2 Mi
	// pixels at most).
	b.KV[v+"longest_edge"] = uint32(16 << 20)
	linear := func(name string, in, out uint64) {
		b.Add(b.Random(name+".weight", in, out), b.Fill(name+".bias", 0, out))
	}
	norm := func(name string, n uint64) {
		b.Add(b.Ones(name+".weight", n), b.Fill(name+".bias", 0, n))
	}
	b.Add(
		// The converter folds (width, channels) of the 3D convolution's
		// kernel into one dimension: patch, patch, frames, 3×width. In
		// F16, as published files have it: Ollama's compatibility layer
		// (llama-server, 0.30 and later) splits it for llama.cpp's clip
		// from F16 only.
		b.RandomF16("v.patch_embed.weight", P, P, 2, 3*H),
		b.Fill("v.patch_embed.bias", 0, H),
		b.Random("v.pos_embed.weight", H, qwen3vlPositions),
	)
	for i := range qwen3vlVisionBlocks {
		p := fmt.Sprintf("v.blk.%d.", i)
		norm(p+"norm1", H)
		for _, n := range []string{"attn_q", "attn_k", "attn_v", "attn_out"} {
			linear(p+n, H, H)
		}
		norm(p+"norm2", H)
		linear(p+"mlp.linear_fc1", H, F)
		linear(p+"mlp.linear_fc2", F, H)
	}
	norm("v.merger.norm", H)
	linear("v.merger.linear_fc1", M, M)
	linear("v.merger.linear_fc2", M, b.E)
}
