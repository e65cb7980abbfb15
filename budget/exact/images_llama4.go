package exact

import (
	"math"

	"github.com/ctxproxy/ctxproxy/chat"
)

// llama4Images: Llama 4's images cost a tile grid's patches and markers.
// Ollama v0.17.4 model/models/llama4/process_image.go fits the image to
// a canvas of x×y tiles of vision.image_size pixels, where x·y is at most
// vision.patch_size (the processor's loop runs to the patch size, not to
// a tile count of its own): the canvas with the smallest scale of at
// least 1 (min(canvas width / width, canvas height / height)), else the
// largest scale, the smallest area among equal scales. Each tile becomes
// (image_size/patch_size · pixel_shuffle_ratio)² embeddings
// (model_vision.go, VisionAdapter), and a canvas of more than one tile
// adds a global tile of the whole image. PostTokenize (model.go) writes
// <|image_start|>, each tile's <|patch|> tokens followed by a tile
// separator, then <|image|>, the global tile's (or the only tile's)
// <|patch|> tokens and a closing token: tiles·(patches+1) + patches + 3
// with more than one tile, patches + 3 with one. The keys are
// llama4.vision.image_size, llama4.vision.patch_size and
// llama4.vision.pixel_shuffle_ratio, which Ollama's converter writes and
// its model code reads without a default; missing, they are Llama 4's
// (336, 14, 0.5).
func llama4Images(kv map[string]any) imageCoster {
	size := positiveKeyOr(kv, "llama4.vision.image_size", 336)
	patch := positiveKeyOr(kv, "llama4.vision.patch_size", 14)
	ratio, ok := kv["llama4.vision.pixel_shuffle_ratio"].(float64)
	if !ok || ratio <= 0 {
		ratio = 0.5
	}
	// The shuffle narrows each side of a tile's patch grid in float32,
	// truncated, as the adapter reshapes it.
	side := int(float32(size/patch) * float32(ratio))
	patches := side * side
	// Every canvas of at most patch tiles, by its tiles across and down.
	var canvases [][2]int
	for n := 1; n <= patch; n++ {
		for x := 1; x <= n; x++ {
			if n%x == 0 {
				canvases = append(canvases, [2]int{x, n / x})
			}
		}
	}
	cost := func(w, h int) int {
		tiles := llama4Tiles(canvases, size, w, h)
		if tiles == 1 {
			return patches + 3
		}
		return tiles*(patches+1) + patches + 3
	}
	return func(img chat.Image) (int, bool) {
		if !img.Known() {
			// A typical photo, 1024×768, as the rule charges it.
			return cost(1024, 768), false
		}
		return cost(img.Width, img.Height), true
	}
}

// llama4Tiles returns the tiles of the canvas Ollama's Llama 4 image
// processor picks for a w×h image among canvases (tiles across and down,
// each tile size pixels a side): bestResolution in process_image.go.
func llama4Tiles(canvases [][2]int, size, w, h int) int {
	scales := make([]float64, len(canvases))
	best, fits := math.MaxFloat64, false
	largest := 0.0
	for i, c := range canvases {
		s := min(float64(c[0]*size)/float64(w), float64(c[1]*size)/float64(h))
		scales[i] = s
		if s >= 1 && s < best {
			best, fits = s, true
		}
		largest = max(largest, s)
	}
	if !fits {
		best = largest
	}
	tiles := 0
	for i, c := range canvases {
		if math.Abs(scales[i]-best) < 1e-6 && (tiles == 0 || c[0]*c[1] < tiles) {
			tiles = c[0] * c[1]
		}
	}
	return tiles
}

// llama4ServerImages: on llama-server (Ollama 0.30 and later) clip's
// "llama4" projector (Ollama's compatibility layer hands it the tower,
// with a merge of round(1/pixel_shuffle_ratio), 2 by default) pools each
// tile of vision.image_size pixels into (image_size/patch_size/merge)²
// tokens. An image no larger than a tile on both sides is one tile;
// a larger one is fitted to the best of the canvases of 1 to 3 tiles
// across and down but one (mtmd's llava-uhd slicing: the most of the
// image kept, the least canvas wasted) and becomes its tiles plus an
// overview tile. mtmd writes <|image_start|> before and <|image_end|>
// after, and no tile separators. The keys must be there: clip refuses a
// tower without them (nil).
func llama4ServerImages(kv map[string]any, text func(string) int) imageCoster {
	size, ok1 := number(kv["llama4.vision.image_size"])
	patch, ok2 := number(kv["llama4.vision.patch_size"])
	if !ok1 || !ok2 || size <= 0 || patch <= 0 || size < patch {
		return nil
	}
	merge := 2
	if ratio, ok := kv["llama4.vision.pixel_shuffle_ratio"].(float64); ok && ratio > 0 {
		if m := int(math.Round(float64(1 / float32(ratio)))); m > 0 {
			merge = m
		}
	}
	side := size / patch
	perTile := side * side / (merge * merge)
	markers := text("<|image_start|>") + text("<|image_end|>")
	return func(img chat.Image) (int, bool) {
		known := img.Known()
		if !known {
			img = chat.Image{Width: 1024, Height: 768}
		}
		tiles := 1
		if img.Width > size || img.Height > size {
			x, y := llama4ServerCanvas(img.Width, img.Height, size)
			tiles += x * y
		}
		return tiles*perTile + markers, known
	}
}

// llama4ServerCanvas returns the canvas, in tiles across and down, mtmd
// fits a w×h image to (select_best_resolution over 1..3 × 1..3 tiles but
// 1×1, in that order): the one that keeps the most of the image's pixels
// after an aspect-preserving fit, then the one that wastes the least.
func llama4ServerCanvas(w, h, tile int) (x, y int) {
	best, wasted := 0, math.MaxInt
	for cx := 1; cx <= 3; cx++ {
		for cy := 1; cy <= 3; cy++ {
			if cx == 1 && cy == 1 {
				continue
			}
			cw, ch := cx*tile, cy*tile
			scale := min(float32(cw)/float32(w), float32(ch)/float32(h))
			fw, fh := int(float32(w)*scale), int(float32(h)*scale)
			effective := min(fw*fh, w*h)
			waste := cw*ch - effective
			if effective > best || (effective == best && waste < wasted) {
				best, wasted, x, y = effective, waste, cx, cy
			}
		}
	}
	return x, y
}
