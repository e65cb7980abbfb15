package exact

import "github.com/ctxproxy/ctxproxy/chat"

// mllamaImages: Llama 3.2 Vision's images cost one prompt token whatever
// their size. Ollama's model code (Ollama v0.17.4
// model/models/mllama/model.go) turns an image into the vision tower's
// states for the cross-attention layers (tiled, up to
// vision.max_num_tiles tiles of vision.image_size, which changes the
// states but never the prompt) and PostTokenize puts the single
// <|image|> token (id 128256) where the image's tag was; the runner
// counts that one input in prompt_eval_count.
func mllamaImages(map[string]any) imageCoster {
	return func(chat.Image) (int, bool) { return 1, true }
}
