package ggufgen

import "fmt"

// qwen25vl is Qwen 2.5 VL's text model on Ollama's own engine
// (model/models/qwen25vl): Qwen 2's blocks (Llama's, with a bias on the
// query, key and value projections) and multimodal rotary positions in
// sections of the head's half (rope.mrope_section; Qwen 2.5 VL's
// 16/24/24 of 128 scaled to the generated head). The vision tower is left
// out, with vision.block_count 0: Ollama builds the tower from that key
// (32 blocks by default) and encodes a blank image with it when it loads
// the model, unless it has no blocks. Shape.Vision adds it:
// qwen25vlVision.
func init() {
	layouts["qwen25vl"] = Layout{
		KV: func(b *Builder) {
			b.KV["qwen25vl.vision.block_count"] = uint32(0)
			half := int32(b.HeadDim / 2)
			b.KV["qwen25vl.rope.mrope_section"] = []int32{half / 4, half * 3 / 8, half - half/4 - half*3/8}
		},
		Block: func(b *Builder, p string) {
			llamaBlock(b, p)
			b.Add(
				b.Random(p+"attn_q.bias", b.E),
				b.Random(p+"attn_k.bias", b.K),
				b.Random(p+"attn_v.bias", b.K),
			)
		},
		Vision: qwen25vlVision,
	}
}

// The tiny vision tower of a generated Qwen 2.5 VL: 8-pixel patches
// (Qwen's are 14: a key the image rule must read), merged 2×2 into one
// embedding each, so an image costs one token per 16×16 pixels of its
// resized size; images are resized to at most Qwen25VLMaxPixels pixels
// (Qwen's default is 2 MiB-pixels), which keeps every image under a
// batch of tokens and the 2048×2048 image Ollama encodes when it loads
// the model small. One encoder block 32 wide with 2 heads.
const (
	qwen25vlPatchSize    = 8
	qwen25vlMergeSize    = 2
	qwen25vlVisionWidth  = 32
	qwen25vlVisionFF     = 64
	qwen25vlVisionHeads  = 2
	qwen25vlVisionBlocks = 1
	// Qwen25VLMaxPixels is the generated model's vision.max_pixels.
	Qwen25VLMaxPixels = 100000
	// qwen25vlImagePad is the highest token id Ollama's Qwen 2.5 VL
	// model code puts into a prompt with an image, by number (its
	// PostTokenize: 151652 <|vision_start|>, 151653 <|vision_end|>,
	// 151655 <|image_pad|>): the text model looks each up in its
	// embedding, so the vocabulary must hold it.
	qwen25vlImagePad = 151655
)

// qwen25vlVision adds the vision tower ("v.": two temporal patch
// convolutions, the encoder blocks, the patch merger) that Ollama's
// Qwen 2.5 VL model code loads (model_vision.go), with the
// qwen25vl.vision.* keys its converter writes and max_pixels, which its
// image processor reads. The window (vision.window_size, in pixels) is
// 4 merged patches a side, as Qwen's 112 pixels are of its 14-pixel
// patches: Ollama's window mask assumes it. The vocabulary must reach
// token 151655 (qwen25vlImagePad).
func qwen25vlVision(b *Builder) error {
	toks, _ := b.KV["tokenizer.ggml.tokens"].([]string)
	if n := len(toks); n <= qwen25vlImagePad {
		return fmt.Errorf("ggufgen: a Qwen 2.5 VL vision model needs a vocabulary of more than %d tokens (its image tokens have fixed ids), not %d", qwen25vlImagePad, n)
	}
	const (
		H, F   = qwen25vlVisionWidth, qwen25vlVisionFF
		P, M   = qwen25vlPatchSize, qwen25vlMergeSize
		merged = H * M * M
	)
	for k, v := range map[string]uint32{
		"block_count":          qwen25vlVisionBlocks,
		"embedding_length":     H,
		"attention.head_count": qwen25vlVisionHeads,
		"num_channels":         3,
		"patch_size":           P,
		"spatial_merge_size":   M,
		"temporal_patch_size":  2,
		"window_size":          4 * P * M,
		"max_pixels":           Qwen25VLMaxPixels,
	} {
		b.KV["qwen25vl.vision."+k] = v
	}
	b.KV["qwen25vl.vision.attention.layer_norm_epsilon"] = float32(1e-6)
	b.KV["qwen25vl.vision.rope.freq_base"] = float32(10000)
	linear := func(name string, in, out uint64) {
		b.Add(b.Random(name+".weight", in, out), b.Fill(name+".bias", 0, out))
	}
	b.Add(b.Random("v.patch_embd_0.weight", P, P, 3, H), b.Random("v.patch_embd_1.weight", P, P, 3, H))
	for i := range qwen25vlVisionBlocks {
		p := fmt.Sprintf("v.blk.%d.", i)
		b.Add(b.Ones(p+"ln1.weight", H), b.Ones(p+"ln2.weight", H))
		for _, n := range []string{"attn_q", "attn_k", "attn_v", "attn_out"} {
			linear(p+n, H, H)
		}
		linear(p+"ffn_gate", H, F)
		linear(p+"ffn_up", H, F)
		linear(p+"ffn_down", F, H)
	}
	b.Add(b.Ones("v.merger.ln_q.weight", H))
	linear("v.merger.mlp.0", merged, merged)
	linear("v.merger.mlp.2", merged, b.E)
	return nil
}
