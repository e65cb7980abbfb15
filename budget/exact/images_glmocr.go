package exact

import (
	"math"

	"github.com/ctxproxy/ctxproxy/chat"
)

// glmocrImages: GLM-OCR's images cost one token per merged patch of the
// resized image, plus the image start and image end tokens around them.
//
// Ollama v0.17.4 model/models/glmocr/imageprocessor.go (SmartResize)
// resizes an image to multiples of factor = vision.patch_size ×
// vision.spatial_merge_size pixels each way, keeping the pixels of the
// image counted temporal_patch_size times (a still image fills every
// temporal patch) between vision.min_pixels and vision.max_pixels; the
// tower (model_vision.go) cuts it into patch_size patches and the
// downsampling convolution merges each merge×merge square of them into
// one embedding. PostTokenize (model.go) writes image_start, one image
// token per embedding, image_end.
//
// The keys, under glmocr., with the processor's defaults:
// vision.patch_size 14, vision.spatial_merge_size 2,
// vision.temporal_patch_size 2, vision.min_pixels 8·p²·m²·t (12,544) and
// vision.max_pixels 2048·p²·m²·t (3,211,264). Ollama builds the tower
// with vision.block_count blocks (24 unless the file says); with none,
// EncodeMultimodal refuses every image and the request fails: nil, no
// rule.
func glmocrImages(kv map[string]any) imageCoster {
	// A key missing, or not a whole number (a type Ollama's Uint does
	// not read), leaves the default.
	key := func(name string, def int) int {
		if n, ok := number(kv["glmocr.vision."+name]); ok {
			return n
		}
		return def
	}
	if key("block_count", 24) <= 0 {
		return nil
	}
	g := glmocrGrid{
		patch:    key("patch_size", 14),
		merge:    key("spatial_merge_size", 2),
		temporal: key("temporal_patch_size", 2),
	}
	if g.patch <= 0 || g.merge <= 0 {
		return nil // the processor would divide by zero
	}
	// A temporal patch size below 1 is taken as 1 for the frames, and
	// for the pixel bounds' defaults as it stands (newImageProcessor).
	unit := g.patch * g.patch * g.merge * g.merge * g.temporal
	g.minPixels = key("min_pixels", 8*unit)
	g.maxPixels = key("max_pixels", 2048*unit)
	g.temporal = max(g.temporal, 1)
	return g.cost
}

// glmocrGrid is GLM-OCR's resize rule with a model's settings.
type glmocrGrid struct {
	patch, merge, temporal int
	minPixels, maxPixels   int
}

// cost is an image's tokens: (height/factor)·(width/factor) after
// SmartResize, plus image start and image end. An image of unknown size
// is estimated as a 1024×768 one. An image that the bounds shrink to no
// patch on one side fails on the server (nothing to encode): estimated
// as the two markers alone.
func (g glmocrGrid) cost(img chat.Image) (int, bool) {
	if !img.Known() {
		n, _ := g.cost(chat.Image{Width: 1024, Height: 768})
		return n, false
	}
	rows, cols := g.resize(img.Height, img.Width)
	n := rows * cols
	return n + 2, n > 0
}

// resize is Ollama v0.17.4's glmocr SmartResize for one frame, in
// squares of factor pixels: an image with a side under factor scaled up
// first so that its short side is factor, then smartResize with the
// frame's pixels counted temporal times.
func (g glmocrGrid) resize(height, width int) (rows, cols int) {
	factor := g.patch * g.merge
	if height < factor || width < factor {
		scale := float64(factor) / float64(min(height, width))
		height = int(math.Ceil(float64(height) * scale))
		width = int(math.Ceil(float64(width) * scale))
	}
	return smartResize(height, width, factor, g.temporal, g.minPixels, g.maxPixels)
}

// glmocrServerImages: on llama-server (Ollama 0.30 and later) Ollama's
// compatibility layer hands GLM-OCR's tower to clip as a "glm4v"
// projector, which resizes an image by dynSize: squares of
// vision.patch_size × vision.spatial_merge_size (2 unless the file says)
// pixels, between clip's 8 and 4096 of them (min_pixels and max_pixels
// unread, one frame), one token a square, between <|begin_of_image|> and
// <|end_of_image|>. Without a patch size clip refuses the tower (nil).
func glmocrServerImages(kv map[string]any, text func(string) int) imageCoster {
	patch, ok := number(kv["glmocr.vision.patch_size"])
	merge := 2
	if v, has := kv["glmocr.vision.spatial_merge_size"]; has {
		merge, _ = number(v)
	}
	if !ok || patch <= 0 || merge <= 0 {
		return nil
	}
	markers := text("<|begin_of_image|>") + text("<|end_of_image|>")
	return dynSize{factor: patch * merge, minTokens: 8, maxTokens: 4096, markers: markers}.cost
}
