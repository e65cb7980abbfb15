package ggufgen

import (
	"fmt"
	"slices"
)

// glmocr is GLM-OCR's text model on Ollama's own engine
// (model/models/glmocr): Llama's block with the attention output named
// attn_out and a second norm after attention (post_attn_norm) and after
// the feed-forward (post_ffn_norm), with multimodal rotary positions in
// sections of the head's half (rope.mrope_section, GLM-OCR's 2:3:3). The
// vision tower and its merger are left out, with vision.block_count 0:
// Ollama builds the tower from that key (24 blocks by default) and
// encodes a blank image with it when it loads the model, unless it has
// no blocks. Shape.Vision adds them: glmocrVision.
func init() {
	layouts["glmocr"] = Layout{
		KV: func(b *Builder) {
			b.KV["glmocr.attention.key_length"] = uint32(b.HeadDim)
			b.KV["glmocr.attention.value_length"] = uint32(b.HeadDim)
			b.KV["glmocr.rope.partial_rotary_factor"] = float32(1)
			half := int32(b.HeadDim / 2)
			b.KV["glmocr.rope.mrope_section"] = []int32{half * 2 / 8, half * 3 / 8, half - half*2/8 - half*3/8}
			b.KV["glmocr.vision.block_count"] = uint32(0)
		},
		Block: func(b *Builder, p string) {
			E, F, K := b.E, b.F, b.K
			b.Add(
				b.Ones(p+"attn_norm.weight", E),
				b.Random(p+"attn_q.weight", E, E),
				b.Random(p+"attn_k.weight", E, K),
				b.Random(p+"attn_v.weight", E, K),
				b.Random(p+"attn_out.weight", E, E),
				b.Ones(p+"post_attn_norm.weight", E),
				b.Ones(p+"ffn_norm.weight", E),
			)
			b.FeedForward(p, F)
			b.Add(
				b.Ones(p+"post_ffn_norm.weight", E),
			)
		},
		Vision: glmocrVision,
	}
}

// The tiny vision tower of a generated GLM-OCR: 14-pixel patches (two
// temporal frames of one image, as the converter splits GLM-OCR's 3-D
// patch convolution), one block 32 wide with 2 heads, merged 2×2 into
// the text model's width; and images kept between GLMOCRMinPixels and
// GLMOCRMaxPixels (vision.min_pixels and vision.max_pixels, which the
// converter writes from the preprocessor's shortest_edge and
// longest_edge), so that a few hundred pixels already get resized down
// and the tower sees at most 256 patches.
const (
	glmocrPatch        = 14
	glmocrMerge        = 2
	glmocrTemporal     = 2
	glmocrVisionWidth  = 32
	glmocrVisionFF     = 64
	glmocrVisionHeads  = 2
	glmocrVisionBlocks = 1
	// GLMOCRMinPixels and GLMOCRMaxPixels are the generated model's
	// bounds: a frame of 56×56 to 224×224 pixels, counted twice.
	GLMOCRMinPixels = glmocrTemporal * 56 * 56
	GLMOCRMaxPixels = glmocrTemporal * 224 * 224
)

// glmocrImageTokens are the tokens GLM-OCR's PostTokenize writes around
// and for an image (image_start_token_id, image_end_token_id,
// image_token_id; 59256, 59257 and 59280 unless the file says): the
// vocabulary must have them, and the file names their ids, as the
// converter does.
var glmocrImageTokens = []struct{ key, token string }{
	{"glmocr.image_start_token_id", "<|begin_of_image|>"},
	{"glmocr.image_end_token_id", "<|end_of_image|>"},
	{"glmocr.image_token_id", "<|image|>"},
}

// glmocrVision adds GLM-OCR's vision tower ("v.": the patch embedding,
// blocks of RMS-normed attention over one qkv projection with a norm of
// each head's queries and keys, and a gated feed-forward; a final norm)
// and its projector ("mm.": the merging convolution, patch_merger; a
// linear layer, a layer norm and a gated feed-forward) with the
// glmocr.vision.* keys Ollama v0.17.4 model/models/glmocr reads
// (model_vision.go, imageprocessor.go, model.go).
func glmocrVision(b *Builder) error {
	toks, _ := b.KV["tokenizer.ggml.tokens"].([]string)
	for _, it := range glmocrImageTokens {
		id := slices.Index(toks, it.token)
		if id < 0 {
			return fmt.Errorf("ggufgen: a GLM-OCR vision model needs the image token %s in its vocabulary", it.token)
		}
		b.KV[it.key] = uint32(id)
	}
	const (
		H, F, P = glmocrVisionWidth, glmocrVisionFF, glmocrPatch
		head    = H / glmocrVisionHeads
	)
	E, M := b.E, b.F
	b.KV["glmocr.vision.block_count"] = uint32(glmocrVisionBlocks)
	b.KV["glmocr.vision.embedding_length"] = uint32(H)
	b.KV["glmocr.vision.attention.head_count"] = uint32(glmocrVisionHeads)
	b.KV["glmocr.vision.image_size"] = uint32(336)
	b.KV["glmocr.vision.patch_size"] = uint32(P)
	b.KV["glmocr.vision.spatial_merge_size"] = uint32(glmocrMerge)
	b.KV["glmocr.vision.temporal_patch_size"] = uint32(glmocrTemporal)
	b.KV["glmocr.vision.out_hidden_size"] = uint32(E)
	b.KV["glmocr.vision.intermediate_size"] = uint32(F)
	b.KV["glmocr.vision.attention.layer_norm_rms_epsilon"] = float32(1e-5)
	b.KV["glmocr.vision.min_pixels"] = uint32(GLMOCRMinPixels)
	b.KV["glmocr.vision.max_pixels"] = uint32(GLMOCRMaxPixels)
	// CLIP's, Ollama's default and GLM-OCR's own, written as its
	// converter writes them: llama-server's (Ollama 0.30 and later) clip
	// loader refuses a tower without them.
	b.KV["glmocr.vision.image_mean"] = []float32{0.48145466, 0.4578275, 0.40821073}
	b.KV["glmocr.vision.image_std"] = []float32{0.26862954, 0.26130258, 0.27577711}
	b.Add(
		b.Random("v.patch_embd_0.weight", P, P, 3, H),
		b.Random("v.patch_embd_1.weight", P, P, 3, H),
		b.Fill("v.patch_embd.bias", 0, H),
	)
	for i := range glmocrVisionBlocks {
		p := fmt.Sprintf("v.blk.%d.", i)
		b.Add(
			b.Ones(p+"ln1.weight", H),
			b.Random(p+"attn_qkv.weight", H, 3*H),
			b.Ones(p+"attn_q_norm.weight", head),
			b.Ones(p+"attn_k_norm.weight", head),
			b.Random(p+"attn_out.weight", H, H),
			b.Ones(p+"ln2.weight", H),
			b.Random(p+"ffn_gate.weight", H, F),
			b.Random(p+"ffn_up.weight", H, F),
			b.Random(p+"ffn_down.weight", F, H),
		)
	}
	b.Add(
		b.Ones("v.post_ln.weight", H),
		// The merging convolution: a merge×merge kernel from the tower's
		// width to the text model's.
		b.Random("mm.patch_merger.weight", glmocrMerge, glmocrMerge, H, E),
		b.Fill("mm.patch_merger.bias", 0, E),
		b.Random("mm.model.fc.weight", E, E),
		b.Ones("mm.post_norm.weight", E),
		b.Fill("mm.post_norm.bias", 0, E),
		b.Random("mm.gate.weight", E, M),
		b.Random("mm.up.weight", E, M),
		b.Random("mm.down.weight", M, E),
	)
	return nil
}
