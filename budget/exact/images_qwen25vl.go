package exact

import (
	"github.com/ctxproxy/ctxproxy/chat"
)

// Qwen 2.5 VL (qwen25vl) costs an image by its size. Ollama v0.17.4
// model/models/qwen25vl/process_image.go resizes the image so both sides
// are multiples of factor = vision.patch_size × vision.spatial_merge_size
// pixels (SmartResize) and its area lies between 56×56 pixels and
// vision.max_pixels; the tower (model_vision.go) cuts it into
// patch_size squares and its merger joins each merge×merge block of
// patches into one embedding, so an image resized to h×w pixels becomes
// (h/factor)·(w/factor) embeddings. PostTokenize (model.go) puts one
// <|vision_start|> before them and one <|vision_end|> after: the image's
// tokens in prompt_eval_count, which counts the inputs PostTokenize
// returns (runner/ollamarunner/runner.go, numPromptInputs).

// qwen25vlMinPixels is the smallest area SmartResize leaves an image
// with: fixed at 56×56 in Ollama v0.17.4's processor (newImageProcessor),
// whatever the file says.
const qwen25vlMinPixels = 56 * 56

// qwen25vlGrid is Qwen 2.5 VL's resize rule for one model: images are
// measured in squares of factor pixels and kept between
// qwen25vlMinPixels and maxPixels.
type qwen25vlGrid struct {
	factor, maxPixels int
}

// qwen25vlImages makes the rule from the keys Ollama's Qwen 2.5 VL code
// reads (under "qwen25vl.vision."), with its defaults: patch_size 14,
// spatial_merge_size 2, max_pixels 2 MiB-pixels (2<<20), block_count 32.
// A model whose tower has no blocks refuses every image on the server
// (model.ErrNoVisionModel), and a key that is not a positive whole number
// leaves the rule unknown: nil, and ctxproxy estimates.
func qwen25vlImages(kv map[string]any) imageCoster {
	key := func(name string, def int) int {
		v, ok := kv["qwen25vl.vision."+name]
		if !ok {
			return def
		}
		if n, ok := number(v); ok {
			return n
		}
		return -1
	}
	patch, merge, maxPixels := key("patch_size", 14), key("spatial_merge_size", 2), key("max_pixels", 2<<20)
	if key("block_count", 32) <= 0 || patch <= 0 || merge <= 0 || maxPixels <= 0 {
		return nil
	}
	return qwen25vlGrid{factor: patch * merge, maxPixels: maxPixels}.cost
}

// cost is one image's tokens: a square of factor×factor resized pixels
// each, plus <|vision_start|> and <|vision_end|>. An image of unknown
// size is estimated as a 1024×768 photo. Ollama's processor panics on an
// image less than factor pixels wide or high, or whose long side is more
// than 200 times its short side (integer division), and the request
// fails: such an image is estimated as its short side raised to factor
// would cost.
func (g qwen25vlGrid) cost(img chat.Image) (int, bool) {
	if !img.Known() {
		n, _ := g.cost(chat.Image{Width: 1024, Height: 768})
		return n, false
	}
	runs := min(img.Width, img.Height) >= g.factor && max(img.Width, img.Height)/min(img.Width, img.Height) <= 200
	rows, cols := smartResize(max(img.Height, g.factor), max(img.Width, g.factor), g.factor, 1, qwen25vlMinPixels, g.maxPixels)
	return rows*cols + 2, runs
}

// qwen25vlServerImages: on llama-server (Ollama 0.30 and later) clip's
// Qwen 2.5 VL projector resizes an image by dynSize with factor =
// vision.patch_size × vision.spatial_merge_size (2 unless the file says),
// between 1024 squares (Ollama starts llama-server with
// --image-min-tokens 1024 for the Qwen-VL families) and clip's 4096, plus
// <|vision_start|> and <|vision_end|>. Without a patch size clip refuses
// the tower: the rule is unknown (nil).
func qwen25vlServerImages(kv map[string]any, text func(string) int) imageCoster {
	return qwenVLServer(kv, text, "qwen25vl", 1024)
}

// qwenVLServer is the llama-server rule of the Qwen-VL projectors (clip's
// qwen2vl, qwen2.5vl_merger and qwen3vl_merger) for architecture arch,
// whose vision keys Ollama's compatibility layer hands to clip, with at
// least minTokens squares an image.
func qwenVLServer(kv map[string]any, text func(string) int, arch string, minTokens int) imageCoster {
	patch, ok := number(kv[arch+".vision.patch_size"])
	merge := 2
	if v, has := kv[arch+".vision.spatial_merge_size"]; has {
		merge, _ = number(v)
	}
	if !ok || patch <= 0 || merge <= 0 {
		return nil
	}
	markers := text("<|vision_start|>") + text("<|vision_end|>")
	return dynSize{factor: patch * merge, minTokens: minTokens, maxTokens: 4096, markers: markers}.cost
}
