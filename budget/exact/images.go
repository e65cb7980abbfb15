package exact

import "regexp"

// imageTokens is what Ollama charges an image when it decides whether a
// prompt fits (server/prompt.go: a CLIP image is 768 embeddings), and
// ctxproxy's estimate of an image for the vision models whose cost it
// does not know (Tokenizer.imageCost).
const imageTokens = 768

// imgTag is the tag the server writes for an image; a vision model's
// runner cuts the prompt at each tag and puts the image's tokens there.
var imgTag = regexp.MustCompile(`\[img-(\d+)\]`)

// gemma3ImageCost returns the tokens one image costs a Gemma 3 model of
// model_info kv on Ollama's engine, 0 for other architectures. Gemma 3's
// are fixed: the projector pools every image to mm_tokens_per_image
// embeddings (256 unless the file says; the key Ollama's model code
// reads, gemma3.mm_tokens_per_image), between the four tokens its model
// code puts around them ("\n\n", start of image, end of image, "\n\n").
// Checked against a real server's prompt_eval_count in the e2e suite.
func gemma3ImageCost(kv map[string]any) int {
	if arch, _ := kv["general.architecture"].(string); arch != "gemma3" {
		return 0
	}
	if n, ok := number(kv["gemma3.mm_tokens_per_image"]); ok && n > 0 {
		return n + 4
	}
	return 256 + 4
}
