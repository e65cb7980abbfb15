package ggufgen

// qwen3vl and qwen3vlmoe are Qwen 3 VL's text models on Ollama's own
// engine (model/models/qwen3vl, one code for both): Qwen 3's blocks
// (qwen3vl) or Qwen 3 MoE's (qwen3vlmoe, sparse for an architecture
// ending in "moe"), with interleaved multimodal rotary positions in
// sections of the head's half. Ollama reads them from mrope_sections;
// its converter writes rope.mrope_section instead, so a converted file
// gets the default 24/20/20, made for a 128-wide head, and the generated
// file sets mrope_sections in that ratio to its own head. The vision
// tower is left out, with vision.block_count 0: Ollama builds the tower
// from that key (32 blocks by default) and encodes a blank image with it
// when it loads the model, unless it has no blocks.
func init() {
	kv := func(arch string) func(b *Builder) {
		return func(b *Builder) {
			b.KV[arch+".attention.key_length"] = uint32(b.HeadDim)
			b.KV[arch+".attention.value_length"] = uint32(b.HeadDim)
			b.KV[arch+".vision.block_count"] = uint32(0)
			half := int32(b.HeadDim / 2)
			b.KV[arch+".mrope_sections"] = []int32{half * 3 / 8, half * 5 / 16, half - half*3/8 - half*5/16}
		}
	}
	// Looked up when a model is written, as init order between files is
	// not to be relied on.
	layouts["qwen3vl"] = Layout{KV: kv("qwen3vl"), Block: func(b *Builder, p string) { layouts["qwen3"].Block(b, p) }}
	layouts["qwen3vlmoe"] = Layout{
		KV: func(b *Builder) {
			kv("qwen3vlmoe")(b)
			// qwen3moe's experts: 4, 2 used per token.
			b.KV["qwen3vlmoe.expert_count"] = uint32(4)
			b.KV["qwen3vlmoe.expert_used_count"] = uint32(2)
			b.KV["qwen3vlmoe.expert_feed_forward_length"] = uint32(b.F)
		},
		Block: func(b *Builder, p string) { layouts["qwen3moe"].Block(b, p) },
	}
}
