package ggufgen

import (
	"fmt"
	"slices"
)

// mllama is Llama 3.2 Vision's text model on Ollama's own engine
// (model/models/mllama): Llama's blocks, but the layers listed in
// attention.cross_attention_layers attend to the image instead of the
// text (cross_attn_*: queries from the text, keys and values from the
// projected image, a norm of the queries and keys of each head, and a
// tanh gate on attention and on the feed-forward). Here the first layer
// is a cross-attention one and the last a self-attention one, as in Llama
// 3.2 Vision (layers 3, 8, … 38 of 40); without an image Ollama skips the
// cross-attention layers. The vision tower and projector are left out
// unless Shape.Vision asks for them (mllamaVision): Ollama builds the
// tower from vision.block_count and vision.global.block_count, and
// refuses images when either is 0.
func init() {
	cross := []int32{0}
	layouts["mllama"] = Layout{
		KV: func(b *Builder) {
			b.KV["mllama.attention.cross_attention_layers"] = cross
			b.KV["mllama.vision.block_count"] = uint32(0)
			b.KV["mllama.vision.global.block_count"] = uint32(0)
		},
		Block: func(b *Builder, p string) {
			if !slices.Contains(cross, int32(blockIndex(p))) {
				llamaBlock(b, p)
				return
			}
			E, F, K := b.E, b.F, b.K
			b.Add(
				b.Ones(p+"attn_norm.weight", E),
				b.Random(p+"cross_attn_q_proj.weight", E, E),
				b.Ones(p+"cross_attn_q_norm.weight", b.HeadDim),
				b.Random(p+"cross_attn_k_proj.weight", E, K),
				b.Ones(p+"cross_attn_k_norm.weight", b.HeadDim),
				b.Random(p+"cross_attn_v_proj.weight", E, K),
				b.Random(p+"cross_attn_o_proj.weight", E, E),
				b.Fill(p+"cross_attn_attn_gate", 0.5, 1),
				b.Ones(p+"ffn_norm.weight", E),
			)
			b.FeedForward(p, F)
			b.Add(
				b.Fill(p+"cross_attn_mlp_gate", 0.5, 1),
			)
		},
		Vision: mllamaVision,
	}
}

// The tiny vision tower of a generated Llama 3.2 Vision: tiles of
// 80×80 pixels cut into 2-pixel patches, 40×40 of them as Ollama's model
// code needs (it embeds positions 0 to 1600, the patches and the class
// embedding, whatever the sizes say), up to 2 tiles an image; one local
// and one global encoder block 16 wide with 2 heads, the local block's
// input kept as the intermediate layer the projector also reads.
const (
	mllamaImageSize    = 80
	mllamaPatchSize    = 2
	mllamaMaxTiles     = 2
	mllamaVisionWidth  = 16
	mllamaVisionFF     = 32
	mllamaVisionHeads  = 2
	mllamaVisionBlocks = 1
	// mllamaImageToken is the id Ollama's model code puts in place of an
	// image, by number (its PostTokenize: 128256 <|image|>): the text
	// model looks it up in its embedding, so the vocabulary must hold
	// it.
	mllamaImageToken = 128256
)

// mllamaVision adds the vision tower ("v.") and the projector ("mm.0")
// that Ollama v0.17.4's Llama 3.2 Vision model code loads
// (model/models/mllama/model_vision.go, model.go) with the
// mllama.vision.* keys its converter writes (convert/convert_mllama.go).
// The vocabulary must reach token 128256 (mllamaImageToken).
func mllamaVision(b *Builder) error {
	toks, _ := b.KV["tokenizer.ggml.tokens"].([]string)
	if n := len(toks); n <= mllamaImageToken {
		return fmt.Errorf("ggufgen: a Llama 3.2 Vision model needs a vocabulary of more than %d tokens (its image token has a fixed id), not %d", mllamaImageToken, n)
	}
	const (
		H, F  = mllamaVisionWidth, mllamaVisionFF
		P, T  = mllamaPatchSize, mllamaMaxTiles
		sides = mllamaImageSize / mllamaPatchSize
		// positions are the patches and the class embedding.
		positions = sides*sides + 1
	)
	// ratios are the tile arrangements of at most T tiles (1×1, 1×2,
	// 2×1 for 2), each an aspect ratio id from 1: the embeddings by
	// ratio have a row for each and one for id 0.
	ratios := 0
	for w := 1; w <= T; w++ {
		ratios += T / w
	}
	indices := []int32{0} // the intermediate layers, of the local blocks
	b.KV["mllama.vision.block_count"] = uint32(mllamaVisionBlocks)
	b.KV["mllama.vision.global.block_count"] = uint32(mllamaVisionBlocks)
	b.KV["mllama.vision.intermediate_layers_indices"] = indices
	b.KV["mllama.vision.embedding_length"] = uint32(H)
	b.KV["mllama.vision.feed_forward_length"] = uint32(F)
	b.KV["mllama.vision.attention.head_count"] = uint32(mllamaVisionHeads)
	b.KV["mllama.vision.attention.layer_norm_epsilon"] = float32(1e-5)
	b.KV["mllama.vision.image_size"] = uint32(mllamaImageSize)
	b.KV["mllama.vision.patch_size"] = uint32(P)
	b.KV["mllama.vision.max_num_tiles"] = uint32(T)
	b.KV["mllama.vision.num_channels"] = uint32(3)
	norm := func(name string) {
		b.Add(b.Ones(name+".weight", H), b.Fill(name+".bias", 0, H))
	}
	gate := func(name string) { b.Add(b.Fill(name, 0.5, 1)) }
	b.Add(
		b.Random("v.patch_embd.weight", P, P, 3, H),
		b.Random("v.class_embd", H),
		b.Random("v.position_embd.weight", H, positions),
		b.Random("v.tile_position_embd.weight", H*positions*T, uint64(ratios+1)),
		b.Random("v.pre_tile_position_embd.weight", H*T, uint64(ratios+1)),
		b.Random("v.post_tile_position_embd.weight", H*T, uint64(ratios+1)),
	)
	for _, g := range []string{"v.position_embd.gate", "v.tile_position_embd.gate", "v.pre_tile_position_embd.gate", "v.post_tile_position_embd.gate"} {
		gate(g)
	}
	norm("v.pre_ln")
	norm("v.post_ln")
	for _, stack := range []string{"v.blk.", "v.global.blk."} {
		for i := range mllamaVisionBlocks {
			p := fmt.Sprintf("%s%d.", stack, i)
			norm(p + "attn_norm")
			for _, n := range []string{"attn_q", "attn_k", "attn_v", "attn_output"} {
				b.Add(b.Random(p+n+".weight", H, H))
			}
			norm(p + "ffn_norm")
			b.Add(
				b.Random(p+"ffn_up.weight", H, F), b.Fill(p+"ffn_up.bias", 0, F),
				b.Random(p+"ffn_down.weight", F, H), b.Fill(p+"ffn_down.bias", 0, H),
			)
			if stack == "v.global.blk." {
				gate(p + "attn_gate")
				gate(p + "ffn_gate")
			}
		}
	}
	// The projector reads the last state and the intermediate ones.
	in := uint64(H * (1 + len(indices)))
	b.Add(b.Random("mm.0.weight", in, b.E), b.Fill("mm.0.bias", 0, b.E))
	return nil
}
