package ggufgen

// mistral3 is Mistral 3's text model on Ollama's own engine: Llama's
// blocks, with the head width in attention.key_length. Its vision
// tower and projector are built only when their tensors exist, so the
// generated model has none.
func init() {
	layouts["mistral3"] = Layout{
		KV: func(b *Builder) {
			b.KV["mistral3.attention.key_length"] = uint32(b.HeadDim)
			b.KV["mistral3.attention.value_length"] = uint32(b.HeadDim)
		},
		Block: llamaBlock,
	}
}
