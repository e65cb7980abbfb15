package ggufgen

import "fmt"

// gemma3 is Gemma 3's text model as Ollama's own engine loads it
// (model/models/gemma3): Llama's block with a norm of the queries and
// keys of each head and a second norm after attention and after the
// feed-forward. Its head width is a key of its own (Ollama's default is
// 256), half the layers use a sliding window. The vision tower is left
// out (Ollama builds it only when its tensors exist) unless Shape.Vision
// asks for it: gemma3Vision.
func init() {
	layouts["gemma3"] = Layout{
		KV: func(b *Builder) {
			b.KV["gemma3.attention.key_length"] = uint32(b.HeadDim)
			b.KV["gemma3.attention.value_length"] = uint32(b.HeadDim)
			b.KV["gemma3.attention.sliding_window"] = uint32(512)
			b.KV["gemma3.rope.local.freq_base"] = float32(10000)
			b.KV["gemma3.attention.layer_norm_rms_epsilon"] = float32(1e-6)
		},
		Block: func(b *Builder, p string) {
			llamaBlock(b, p)
			b.Add(
				b.Ones(p+"attn_q_norm.weight", b.HeadDim),
				b.Ones(p+"attn_k_norm.weight", b.HeadDim),
				b.Ones(p+"post_attention_norm.weight", b.E),
				b.Ones(p+"post_ffw_norm.weight", b.E),
			)
		},
		Vision: gemma3Vision,
	}
}

// The tiny vision tower of a generated Gemma 3: a 56-pixel image cut
// into 14-pixel patches (4×4 = 16), one encoder block 32 wide with 2
// heads, and a projector that pools the 4×4 patches to
// Gemma3VisionTokens (2×2: its pooling kernel, 4/√4 = 2, must divide the
// patches per side evenly).
const (
	gemma3ImageSize    = 56
	gemma3PatchSize    = 14
	gemma3VisionWidth  = 32
	gemma3VisionFF     = 64
	gemma3VisionHeads  = 2
	gemma3VisionBlocks = 1
	// Gemma3VisionTokens is the generated model's
	// gemma3.mm_tokens_per_image: the embeddings each image becomes.
	Gemma3VisionTokens = 4
	// gemma3EndOfImage is the highest token id Ollama's Gemma 3 model
	// code puts into a prompt with an image, by number (its PostTokenize:
	// 108 "\n\n", 255999 <start_of_image>, 256000 <end_of_image>): the
	// text model looks each up in its embedding, so the vocabulary must
	// hold it.
	gemma3EndOfImage = 256000
)

// gemma3Vision adds the SigLIP vision tower ("v.") and the projector
// ("mm.") that Ollama's Gemma 3 model code loads (model_vision.go,
// model.go), with the gemma3.vision.* keys its converter writes and the
// gemma3.mm_tokens_per_image key its model code reads. The vocabulary
// must reach token 256000 (gemma3EndOfImage).
func gemma3Vision(b *Builder) error {
	toks, _ := b.KV["tokenizer.ggml.tokens"].([]string)
	if n := len(toks); n <= gemma3EndOfImage {
		return fmt.Errorf("ggufgen: a Gemma 3 vision model needs a vocabulary of more than %d tokens (its image tokens have fixed ids), not %d", gemma3EndOfImage, n)
	}
	const (
		H, F  = gemma3VisionWidth, gemma3VisionFF
		P     = gemma3PatchSize
		sides = gemma3ImageSize / gemma3PatchSize
	)
	b.KV["gemma3.vision.block_count"] = uint32(gemma3VisionBlocks)
	b.KV["gemma3.vision.embedding_length"] = uint32(H)
	b.KV["gemma3.vision.feed_forward_length"] = uint32(F)
	b.KV["gemma3.vision.image_size"] = uint32(gemma3ImageSize)
	b.KV["gemma3.vision.patch_size"] = uint32(P)
	b.KV["gemma3.vision.num_channels"] = uint32(3)
	b.KV["gemma3.vision.attention.head_count"] = uint32(gemma3VisionHeads)
	b.KV["gemma3.vision.attention.layer_norm_epsilon"] = float32(1e-6)
	b.KV["gemma3.mm_tokens_per_image"] = uint32(Gemma3VisionTokens)
	norm := func(name string) {
		b.Add(b.Ones(name+".weight", H), b.Fill(name+".bias", 0, H))
	}
	linear := func(name string, in, out uint64) {
		b.Add(b.Random(name+".weight", in, out), b.Fill(name+".bias", 0, out))
	}
	b.Add(
		b.Random("v.patch_embedding.weight", P, P, 3, H),
		b.Fill("v.patch_embedding.bias", 0, H),
		b.Random("v.position_embedding.weight", H, sides*sides),
	)
	for i := range gemma3VisionBlocks {
		p := fmt.Sprintf("v.blk.%d.", i)
		norm(p + "layer_norm1")
		for _, n := range []string{"attn_q", "attn_k", "attn_v", "attn_output"} {
			linear(p+n, H, H)
		}
		norm(p + "layer_norm2")
		linear(p+"mlp.fc1", H, F)
		linear(p+"mlp.fc2", F, H)
	}
	norm("v.post_layernorm")
	b.Add(
		b.Ones("mm.mm_soft_emb_norm.weight", H),
		// Ollama multiplies by its transpose: the text width first.
		b.Random("mm.mm_input_projection.weight", b.E, H),
	)
	return nil
}
