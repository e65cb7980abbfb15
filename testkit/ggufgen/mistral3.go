package ggufgen

import "fmt"

// mistral3 is Mistral 3's text model on Ollama's own engine: Llama's
// blocks, with the head width in attention.key_length. Its vision
// tower and projector are built only when their tensors exist, so the
// generated model has none unless Shape.Vision asks for them:
// mistral3Vision.
func init() {
	layouts["mistral3"] = Layout{
		KV: func(b *Builder) {
			b.KV["mistral3.attention.key_length"] = uint32(b.HeadDim)
			b.KV["mistral3.attention.value_length"] = uint32(b.HeadDim)
		},
		Block:  llamaBlock,
		Vision: mistral3Vision,
	}
}

// The tiny vision tower of a generated Mistral 3: images scaled to at
// most Mistral3LongestEdge pixels a side, cut into 14-pixel patches
// (16×16 at most), merged 2×2 by the projector; one encoder block 32
// wide with 2 heads of 16.
const (
	// Mistral3LongestEdge is the generated model's
	// mistral3.vision.longest_edge (and vision.image_size, which bounds
	// the tower's 2D rotary table): a larger image is scaled down to it.
	Mistral3LongestEdge = 224
	mistral3PatchSize   = 14
	mistral3MergeSize   = 2
	mistral3VisionWidth = 32
	mistral3VisionFF    = 64
	mistral3VisionHeads = 2
	mistral3VisionBlock = 1
	// mistral3ImageEnd is the highest token id Ollama's Mistral 3 model
	// code puts into a prompt with an image, by number (its
	// PostTokenize: 10 [IMG], 12 [IMG_BREAK], 13 [IMG_END]): the text
	// model looks each up in its embedding.
	mistral3ImageEnd = 13
)

// mistral3Vision adds the Pixtral vision tower ("v.") and the projector
// with its patch merger ("mm.") that Ollama v0.17.4's Mistral 3 model
// code loads (model/models/mistral3/model_vision.go, model.go), with the
// mistral3.vision.* keys its converter writes, and the
// mistral3.vision.longest_edge key its image processor reads
// (imageproc.go; the converter leaves it to the default of 1540).
func mistral3Vision(b *Builder) error {
	toks, _ := b.KV["tokenizer.ggml.tokens"].([]string)
	if n := len(toks); n <= mistral3ImageEnd {
		return fmt.Errorf("ggufgen: a Mistral 3 vision model needs a vocabulary of more than %d tokens (its image tokens have fixed ids), not %d", mistral3ImageEnd, n)
	}
	const (
		H, F = mistral3VisionWidth, mistral3VisionFF
		P, M = mistral3PatchSize, mistral3MergeSize
	)
	b.KV["mistral3.vision.block_count"] = uint32(mistral3VisionBlock)
	b.KV["mistral3.vision.embedding_length"] = uint32(H)
	b.KV["mistral3.vision.feed_forward_length"] = uint32(F)
	b.KV["mistral3.vision.attention.head_count"] = uint32(mistral3VisionHeads)
	b.KV["mistral3.vision.attention.key_length"] = uint32(H / mistral3VisionHeads)
	b.KV["mistral3.vision.image_size"] = uint32(Mistral3LongestEdge)
	b.KV["mistral3.vision.longest_edge"] = uint32(Mistral3LongestEdge)
	b.KV["mistral3.vision.patch_size"] = uint32(P)
	b.KV["mistral3.vision.num_channels"] = uint32(3)
	b.KV["mistral3.vision.rope.freq_base"] = float32(10000)
	b.KV["mistral3.image_token_index"] = uint32(10)
	b.KV["mistral3.spatial_merge_size"] = uint32(M)
	b.Add(
		b.Random("v.patch_conv.weight", P, P, 3, H),
		b.Ones("v.encoder_norm.weight", H),
	)
	for i := range mistral3VisionBlock {
		p := fmt.Sprintf("v.blk.%d.", i)
		b.Add(b.Ones(p+"attn_norm.weight", H))
		for _, n := range []string{"attn_q", "attn_k", "attn_v", "attn_output"} {
			b.Add(b.Random(p+n+".weight", H, H))
		}
		b.Add(
			b.Ones(p+"ffn_norm.weight", H),
			b.Random(p+"ffn_gate.weight", H, F),
			b.Random(p+"ffn_up.weight", H, F),
			b.Random(p+"ffn_down.weight", F, H),
		)
	}
	b.Add(
		b.Ones("mm.norm.weight", H),
		b.Random("mm.patch_merger.merging_layer.weight", H*M*M, H),
		b.Random("mm.linear_1.weight", H, b.E),
		b.Random("mm.linear_2.weight", b.E, b.E),
	)
	return nil
}
