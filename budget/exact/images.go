package exact

import (
	"regexp"

	"github.com/ctxproxy/ctxproxy/chat"
)

// imageTokens is what Ollama charges an image when it decides whether a
// prompt fits (server/prompt.go: a CLIP image is 768 embeddings), and
// ctxproxy's estimate of an image whose cost it cannot work out
// (Tokenizer.imageCost).
const imageTokens = 768

// imgTag is the tag the server writes for an image; a vision model's
// runner cuts the prompt at each tag and puts the image's tokens there.
var imgTag = regexp.MustCompile(`\[img-(\d+)\]`)

// imageCoster returns the prompt tokens one image costs a model, and
// whether that is what the runner evaluates (false: an estimate, for an
// image whose size is unknown where the family's cost depends on it).
type imageCoster func(img chat.Image) (tokens int, exact bool)

// visionFamilies maps each architecture whose images Ollama's engine
// turns into prompt tokens by a rule ctxproxy knows to that rule, made
// from the model's facts (model_info). Each rule follows the family's
// model code in Ollama v0.17.4 (model/models/<arch>: its image processor
// and PostTokenize) and is checked against a real server in the e2e
// suite. Other families, and every family on llama.cpp's runner, are
// estimated at imageTokens. From Ollama 0.30 llama-server runs every
// model, and serverFamilies' rules apply instead.
var visionFamilies = map[string]func(kv map[string]any) imageCoster{
	"gemma3":      gemma3Images,
	"qwen25vl":    qwen25vlImages,
	"glmocr":      glmocrImages,
	"deepseekocr": deepseekocrImages,
	"mistral3":    mistral3Images,
	"llama4":      llama4Images,
	"qwen3vl":     qwen3vlImages,
	"qwen3vlmoe":  qwen3vlImages,
	"qwen3next":   qwen3nextImages,
	"qwen35":      qwen3nextImages,
	"qwen35moe":   qwen3nextImages,
	"mllama":      mllamaImages,
	"lfm2":        lfm2Images,
	"lfm2moe":     lfm2Images,
}

// imagesOf returns how model_info kv's images cost on Ollama's engine,
// nil when ctxproxy does not know the family's rule.
func imagesOf(kv map[string]any) imageCoster {
	arch, _ := kv["general.architecture"].(string)
	if rule := visionFamilies[arch]; rule != nil {
		return rule(kv)
	}
	return nil
}

// projectorEstimate is what ctxproxy charges an image for a model whose
// projector is a file of its own, which Ollama runs on llama.cpp's
// runner: the vision encoder's patches, (image_size/patch_size)² from
// the projector's facts (projector_info's clip.vision keys), for the
// projector types that pass them on one embedding each (LLaVA's "mlp"
// and "mlp_norm") or pooled four to one ("ldp", "ldpv2", MobileVLM's);
// imageTokens for any other type or a file without those keys. llama.cpp
// adds each type's own markers, and some tile an image by its size, so
// it stays an estimate the reply's prompt_eval_count corrects.
func projectorEstimate(info map[string]any) int {
	size, ok1 := number(info["clip.vision.image_size"])
	patch, ok2 := number(info["clip.vision.patch_size"])
	if !ok1 || !ok2 || size <= 0 || patch <= 0 || size < patch {
		return imageTokens
	}
	n := (size / patch) * (size / patch)
	switch typ, _ := info["clip.projector_type"].(string); typ {
	case "mlp", "mlp_norm":
		return n
	case "ldp", "ldpv2":
		return n / 4
	}
	return imageTokens
}

// gemma3Images: Gemma 3's images cost a fixed number of tokens whatever
// their size. The projector pools every image to mm_tokens_per_image
// embeddings (256 unless the file says; the key Ollama's model code
// reads, gemma3.mm_tokens_per_image), between the four tokens its model
// code puts around them ("\n\n", start of image, end of image, "\n\n").
func gemma3Images(kv map[string]any) imageCoster {
	n, ok := number(kv["gemma3.mm_tokens_per_image"])
	if !ok || n <= 0 {
		n = 256
	}
	return func(chat.Image) (int, bool) { return n + 4, true }
}

// gemma3ServerImages: on llama-server (Ollama 0.30 and later) Gemma 3's
// images cost a fixed number of tokens too, but clip's, not the file's
// mm_tokens_per_image: the image is resized to vision.image_size pixels
// square, cut into patch_size squares, and each 4×4 block of patches
// pooled into one embedding (clip's default merge for the "gemma3"
// projector; Ollama's compatibility layer sets no other), between the
// <start_of_image> and <end_of_image> mtmd writes around it, and no
// "\n\n" (Ollama's Go engine wrote those). The keys must be there: clip
// refuses a tower without them, and so the rule is unknown (nil).
func gemma3ServerImages(kv map[string]any, text func(string) int) imageCoster {
	size, ok1 := number(kv["gemma3.vision.image_size"])
	patch, ok2 := number(kv["gemma3.vision.patch_size"])
	if !ok1 || !ok2 || size <= 0 || patch <= 0 {
		return nil
	}
	const merge = 4
	side := size / patch
	n := side*side/(merge*merge) + text("<start_of_image>") + text("<end_of_image>")
	return func(chat.Image) (int, bool) { return n, true }
}

// positiveKeyOr returns model_info's whole number at key, or def when it
// is missing or not positive (the image processors divide by these).
func positiveKeyOr(kv map[string]any, key string, def int) int {
	if n, ok := number(kv[key]); ok && n > 0 {
		return n
	}
	return def
}
