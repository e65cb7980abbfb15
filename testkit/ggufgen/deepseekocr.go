package ggufgen

import "fmt"

// deepseekocr is DeepSeek-OCR's text model on Ollama's own engine
// (model/models/deepseekocr): DeepSeek's mixture of experts with plain
// multi-head attention (attn_q, attn_k, attn_v, no latent compression),
// the first leading_dense_block_count layers a gated feed-forward and
// the others a router over 4 experts, 2 used per token, beside a shared
// expert. Every head has its keys and values (head_count_kv is the
// heads), as DeepSeek-OCR's: llama.cpp's deepseek2-ocr (llama-server,
// Ollama 0.30 and later) reads attn_k and attn_v as wide as attn_q.
//
// Unlike the other vision models, Ollama needs the vision part to load
// the model: it encodes a blank image through it when it loads, and the
// model code has no check for a missing tower. So the file has a stub
// of one with no transformer blocks (deepSeekOCRVision), which encodes
// images too; Shape.Vision adds blocks to its two encoders
// (deepseekocrVisionBlocks).
func init() {
	const experts, used = 4, 2
	layouts["deepseekocr"] = Layout{
		KV: func(b *Builder) {
			b.KV["deepseekocr.expert_count"] = uint32(experts)
			b.KV["deepseekocr.expert_used_count"] = uint32(used)
			b.KV["deepseekocr.leading_dense_block_count"] = uint32(1)
			b.KV["deepseekocr.attention.head_count_kv"] = uint32(b.Shape.Heads)
			b.K = b.Q
			deepSeekOCRVision(b)
		},
		Block: func(b *Builder, p string) {
			F := b.F
			normedAttention(b, p)
			if blockIndex(p) < 1 {
				b.FeedForward(p, F)
				return
			}
			b.Experts(p, experts, F)
			b.SharedExpert(p, F)
		},
		Vision: deepseekocrVisionBlocks,
	}
}

// deepSeekOCRVision adds DeepSeek-OCR's vision part with no transformer
// blocks, the least Ollama's model code can encode an image with: SAM's
// patch embedding (16×16 convolution), position embedding (64×64 for a
// 1024-pixel view), neck (1×1 and 3×3 convolutions with a norm after
// each) and the two stride-2 convolutions after it (net_2, net_3), whose
// channels are CLIP's width; CLIP's class and position embeddings (a
// 224-pixel image in 14-pixel patches: 257 positions) and norm; and the
// projector from both to the text model's embedding, with the newline
// and view-separator embeddings.
func deepSeekOCRVision(b *Builder) {
	const sam, neck, net2, clip, heads = 16, 16, 32, 32, 2
	b.KV["deepseekocr.sam.block_count"] = uint32(0)
	b.KV["deepseekocr.sam.embedding_length"] = uint32(sam)
	b.KV["deepseekocr.sam.head_count"] = uint32(heads)
	b.KV["deepseekocr.sam.global_attention_indexes"] = []int32{}
	b.KV["deepseekocr.vision.block_count"] = uint32(0)
	b.KV["deepseekocr.vision.embedding_length"] = uint32(clip)
	b.KV["deepseekocr.vision.head_count"] = uint32(heads)
	b.KV["deepseekocr.vision.image_size"] = uint32(224)
	b.KV["deepseekocr.vision.patch_size"] = uint32(14)
	E := b.E
	b.Add(
		b.Random("s.patch_embd.weight", 16, 16, 3, sam),
		b.Random("s.patch_embd.bias", sam),
		b.Random("s.position_embd", sam, 64, 64),
		b.Random("s.neck.0.weight", 1, 1, sam, neck),
		b.Ones("s.neck.1.weight", neck),
		b.Fill("s.neck.1.bias", 0, neck),
		b.Random("s.neck.2.weight", 3, 3, neck, neck),
		b.Ones("s.neck.3.weight", neck),
		b.Fill("s.neck.3.bias", 0, neck),
		b.Random("s.net_2.weight", 3, 3, neck, net2),
		b.Random("s.net_3.weight", 3, 3, net2, clip),
		b.Random("v.patch_embd.weight", 14, 14, 3, clip),
		b.Random("v.class_embd", clip),
		b.Random("v.position_embd.weight", clip, 257),
		b.Ones("v.pre_layrnorm.weight", clip),
		b.Fill("v.pre_layrnorm.bias", 0, clip),
		b.Random("mm.layers.weight", 2*clip, E),
		b.Fill("mm.layers.bias", 0, E),
		b.Random("mm.image_newline", E),
		b.Random("mm.view_seperator", E),
	)
}

// DeepSeekOCRImageToken is the token Ollama's DeepSeek-OCR model code
// writes for each of an image's embeddings, by number (model.go,
// PostTokenize: 128815, DeepSeek-OCR's <image>): the text model looks it
// up in its embedding, so the vocabulary must hold it.
const DeepSeekOCRImageToken = 128815

// deepseekocrVisionBlocks adds transformer blocks to the encoders of the
// stub deepSeekOCRVision writes: three SAM blocks (layer norms, attention
// over one qkv projection with relative position tables, an MLP), the
// first two in 14×14 windows (tables of 2·14−1 rows), the third global
// over the 64×64 patches of a 1024-pixel view (2·64−1 rows), and a CLIP
// block (layer norms, attention over one qkv projection, a quick-GELU
// MLP), named as Ollama v0.17.4 model/models/deepseekocr loads them
// (model_sam.go, model_vision.go). A windowed and a global block, as
// DeepSeek-OCR has (its global ones are 2, 5, 8 and 11): llama.cpp's
// clip (llama-server, Ollama 0.30 and later) fixes those indexes in its
// code and sets both kinds' position inputs, aborting on a tower without
// one of each. The vocabulary must reach DeepSeekOCRImageToken.
func deepseekocrVisionBlocks(b *Builder) error {
	toks, _ := b.KV["tokenizer.ggml.tokens"].([]string)
	if n := len(toks); n <= DeepSeekOCRImageToken {
		return fmt.Errorf("ggufgen: a DeepSeek-OCR vision model needs a vocabulary of more than %d tokens (its image token has a fixed id), not %d", DeepSeekOCRImageToken, n)
	}
	sam, clip := uint64(b.KV["deepseekocr.sam.embedding_length"].(uint32)), uint64(b.KV["deepseekocr.vision.embedding_length"].(uint32))
	samHead := sam / uint64(b.KV["deepseekocr.sam.head_count"].(uint32))
	const window, global, samBlocks = 14, 64, 3
	norm := func(name string, n uint64) {
		b.Add(b.Ones(name+".weight", n), b.Fill(name+".bias", 0, n))
	}
	linear := func(name string, in, out uint64) {
		b.Add(b.Random(name+".weight", in, out), b.Fill(name+".bias", 0, out))
	}
	b.KV["deepseekocr.sam.block_count"] = uint32(samBlocks)
	b.KV["deepseekocr.sam.global_attention_indexes"] = []int32{samBlocks - 1}
	for i := range samBlocks {
		p := fmt.Sprintf("s.blk.%d.", i)
		side := uint64(window)
		if i == samBlocks-1 {
			side = global
		}
		norm(p+"norm1", sam)
		linear(p+"attn.qkv", sam, 3*sam)
		linear(p+"attn.proj", sam, sam)
		b.Add(
			b.Random(p+"attn.rel_pos_h", samHead, 2*side-1),
			b.Random(p+"attn.rel_pos_w", samHead, 2*side-1),
		)
		norm(p+"norm2", sam)
		linear(p+"mlp.lin1", sam, 4*sam)
		linear(p+"mlp.lin2", 4*sam, sam)
	}
	b.KV["deepseekocr.vision.block_count"] = uint32(1)
	norm("v.blk.0.layer_norm1", clip)
	linear("v.blk.0.self_attn.qkv_proj", clip, 3*clip)
	linear("v.blk.0.self_attn.out_proj", clip, clip)
	norm("v.blk.0.layer_norm2", clip)
	linear("v.blk.0.mlp.fc1", clip, 4*clip)
	linear("v.blk.0.mlp.fc2", 4*clip, clip)
	return nil
}
