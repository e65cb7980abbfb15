package ggufgen

// qwen25vl is Qwen 2.5 VL's text model on Ollama's own engine
// (model/models/qwen25vl): Qwen 2's blocks (Llama's, with a bias on the
// query, key and value projections) and multimodal rotary positions in
// sections of the head's half (rope.mrope_section; Qwen 2.5 VL's
// 16/24/24 of 128 scaled to the generated head). The vision tower is left
// out, with vision.block_count 0: Ollama builds the tower from that key
// (32 blocks by default) and encodes a blank image with it when it loads
// the model, unless it has no blocks.
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
	}
}
