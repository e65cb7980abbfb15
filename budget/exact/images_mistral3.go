package exact

import (
	"math"

	"github.com/ctxproxy/ctxproxy/chat"
)

// mistral3Images: Mistral 3's (and Pixtral's) images cost one token per
// merged patch plus one per row of them. Ollama v0.17.4
// model/models/mistral3/imageproc.go scales an image whose longer side
// exceeds vision.longest_edge down to it (each side floored), then pads
// each side up to whole patches of vision.patch_size; the projector
// (model.go, PatchMerger) merges spatial_merge_size×spatial_merge_size
// patches into one embedding, dropping a row or column that does not
// fill a merge, and EncodeMultimodal hands the text model one input per
// row of merged patches. PostTokenize then writes each row as its
// patches' [IMG] tokens followed by [IMG_BREAK], the last row by
// [IMG_END]: rows×(columns+1) tokens. The keys are
// mistral3.vision.longest_edge (default 1540; Ollama's converter does not
// write it), mistral3.vision.patch_size (14) and
// mistral3.spatial_merge_size (2).
func mistral3Images(kv map[string]any) imageCoster {
	longest := positiveKeyOr(kv, "mistral3.vision.longest_edge", 1540)
	patch := positiveKeyOr(kv, "mistral3.vision.patch_size", 14)
	merge := positiveKeyOr(kv, "mistral3.spatial_merge_size", 2)
	// grid returns the merged patches' columns and rows of a w×h image.
	grid := func(w, h int) (cols, rows int) {
		ratio := max(float64(h)/float64(longest), float64(w)/float64(longest))
		if ratio > 1 {
			w, h = int(math.Floor(float64(w)/ratio)), int(math.Floor(float64(h)/ratio))
		}
		// Patches per side as the processor rounds up (a side scaled to
		// zero still has one patch), then merged.
		return ((w-1)/patch + 1) / merge, ((h-1)/patch + 1) / merge
	}
	return func(img chat.Image) (int, bool) {
		if !img.Known() {
			// A typical photo, 1024×768, as the rule charges it.
			cols, rows := grid(1024, 768)
			return rows * (cols + 1), false
		}
		cols, rows := grid(img.Width, img.Height)
		// With no merged patch on a side, v0.17.4's runner stops on the
		// image (model.go's PostTokenize or the text model's forward pass
		// indexes embeddings that are not there) and the request fails:
		// no count to match.
		return rows * (cols + 1), rows > 0 && cols > 0
	}
}

// mistral3ServerImages: on llama-server (Ollama 0.30 and later) Ollama's
// compatibility layer hands Mistral 3's tower to clip as a "pixtral"
// projector, which resizes an image by dynSize (squares of patch_size ×
// spatial_merge_size pixels, between 8 and 1024 of them; longest_edge is
// not read) and gives one token per square plus an [IMG_BREAK] embedding
// between rows (the layer supplies one): columns×rows + rows−1. mtmd
// writes [IMG_END] after the image, nothing before it. Without a patch
// size clip refuses the tower: the rule is unknown (nil).
func mistral3ServerImages(kv map[string]any, text func(string) int) imageCoster {
	patch, ok := number(kv["mistral3.vision.patch_size"])
	merge := 1 // clip's default for pixtral
	if v, has := kv["mistral3.spatial_merge_size"]; has {
		merge, _ = number(v)
	}
	if !ok || patch <= 0 || merge <= 0 {
		return nil
	}
	d := dynSize{factor: patch * merge, minTokens: 8, maxTokens: 1024}
	end := text("[IMG_END]")
	return func(img chat.Image) (int, bool) {
		known := img.Known()
		if !known {
			img = chat.Image{Width: 1024, Height: 768}
		}
		w, h := d.resize(img.Width, img.Height)
		cols, rows := w/d.factor, h/d.factor
		return cols*rows + rows - 1 + end, known
	}
}
