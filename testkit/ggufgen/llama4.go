package ggufgen

import "fmt"

// llama4 is Llama 4's text model as Ollama's own engine loads it
// (model/models/llama4): Llama's attention, with the head width a key of
// its own (Ollama's default is 128), and a mixture of experts on every
// second layer (interleave_moe_layer_step 2, as Llama 4 Maverick has),
// the others Llama's gated feed-forward. An expert layer has a router, 4
// experts of which each token uses 1, and a shared expert beside them.
// The vision tower is left out (Ollama builds it only when its tensors
// exist) unless Shape.Vision asks for it: llama4Vision. Four layers at
// least, Llama 4's pattern of three chunked-attention layers and a
// global one without rotary positions: llama.cpp (llama-server, Ollama
// 0.30 and later) gives those global layers an attention temperature
// whose input it sets even when no layer reads it, and aborts on a model
// without one (GGML_ASSERT(buf != NULL && "tensor buffer not set")).
func init() {
	const experts = 4
	layouts["llama4"] = Layout{
		KV: func(b *Builder) {
			b.KV["llama4.attention.head_dim"] = uint32(b.HeadDim)
			b.KV["llama4.attention.chunk_size"] = uint32(8192)
			b.KV["llama4.expert_count"] = uint32(experts)
			b.KV["llama4.expert_used_count"] = uint32(1)
			b.KV["llama4.expert_feed_forward_length"] = uint32(b.F)
			b.KV["llama4.interleave_moe_layer_step"] = uint32(2)
			b.KV["llama4.use_qk_norm"] = true
		},
		Block: func(b *Builder, p string) {
			F := b.F
			normedAttention(b, p)
			if (blockIndex(p)+1)%2 != 0 {
				b.FeedForward(p, F)
				return
			}
			b.Experts(p, experts, F)
			b.SharedExpert(p, F)
		},
		Vision: llama4Vision,
		Layers: 4,
	}
}

// The tiny vision tower of a generated Llama 4: tiles of
// Llama4TileSize pixels cut into 14-pixel patches (4×4, and a class
// embedding), one encoder block 32 wide with 2 heads, and a pixel
// shuffle of 0.5 that leaves 2×2 = 4 embeddings a tile. Ollama's image
// processor fits an image to at most patch_size (14) tiles.
const (
	// Llama4TileSize is the generated model's llama4.vision.image_size:
	// the side of one tile.
	Llama4TileSize    = 56
	llama4PatchSize   = 14
	llama4VisionWidth = 32
	llama4VisionFF    = 64
	llama4VisionHeads = 2
	llama4VisionBlock = 1
	llama4AdapterOut  = 32
	// llama4Patch is the highest token id Ollama's Llama 4 model code
	// puts into a prompt with an image, by number (its PostTokenize:
	// 200080 <|image_start|>, 200084 and 200085 the tile separators,
	// 200090 <|image|>, 200092 <|patch|>): the text model looks each up
	// in its embedding, so the vocabulary must hold it.
	llama4Patch = 200092
)

// llama4Vision adds the vision tower ("v.": an unfolding patch embedding,
// class and positional embeddings, LayerNorm blocks and the
// pixel-shuffle adapter) and the projector ("mm.") that Ollama v0.17.4's
// Llama 4 model code loads (model/models/llama4/model_vision.go,
// model.go), with the llama4.vision.* keys its converter writes. The
// vocabulary must reach token 200092 (llama4Patch).
func llama4Vision(b *Builder) error {
	toks, _ := b.KV["tokenizer.ggml.tokens"].([]string)
	if n := len(toks); n <= llama4Patch {
		return fmt.Errorf("ggufgen: a Llama 4 vision model needs a vocabulary of more than %d tokens (its image tokens have fixed ids), not %d", llama4Patch, n)
	}
	const (
		H, F, P = llama4VisionWidth, llama4VisionFF, llama4PatchSize
		side    = Llama4TileSize / llama4PatchSize
		// The pixel shuffle of 0.5 folds 2×2 patches into one embedding
		// 4 times as wide.
		shuffled = H * 4
	)
	b.KV["llama4.vision.block_count"] = uint32(llama4VisionBlock)
	b.KV["llama4.vision.embedding_length"] = uint32(H)
	b.KV["llama4.vision.feed_forward_length"] = uint32(F)
	b.KV["llama4.vision.attention.head_count"] = uint32(llama4VisionHeads)
	b.KV["llama4.vision.image_size"] = uint32(Llama4TileSize)
	b.KV["llama4.vision.patch_size"] = uint32(P)
	b.KV["llama4.vision.rope.freq_base"] = float32(10000)
	b.KV["llama4.vision.layer_norm_epsilon"] = float32(1e-5)
	b.KV["llama4.vision.pixel_shuffle_ratio"] = float32(0.5)
	norm := func(name string) {
		b.Add(b.Ones(name+".weight", H), b.Fill(name+".bias", 0, H))
	}
	linear := func(name string, in, out uint64) {
		b.Add(b.Random(name+".weight", in, out), b.Fill(name+".bias", 0, out))
	}
	b.Add(
		// An unfolded patch (P·P pixels of 3 channels) times its weight.
		b.Random("v.patch_embedding.weight", P*P*3, H),
		b.Random("v.class_embedding", H),
		b.Random("v.positional_embedding_vlm", H, side*side+1),
	)
	norm("v.layernorm_pre")
	for i := range llama4VisionBlock {
		p := fmt.Sprintf("v.blk.%d.", i)
		norm(p + "attn_norm")
		for _, n := range []string{"attn_q", "attn_k", "attn_v", "attn_output"} {
			linear(p+n, H, H)
		}
		norm(p + "ffn_norm")
		linear(p+"mlp.fc1", H, F)
		linear(p+"mlp.fc2", F, H)
	}
	norm("v.layernorm_post")
	b.Add(
		b.Random("v.vision_adapter.mlp.fc1.weight", shuffled, llama4AdapterOut),
		b.Random("v.vision_adapter.mlp.fc2.weight", llama4AdapterOut, llama4AdapterOut),
		b.Random("mm.linear_1.weight", llama4AdapterOut, b.E),
	)
	return nil
}
