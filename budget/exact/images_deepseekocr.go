package exact

import (
	"math"
	"slices"

	"github.com/ctxproxy/ctxproxy/chat"
)

// DeepSeek-OCR's image sizes, fixed in Ollama v0.17.4
// model/models/deepseekocr/imageprocessor.go (ProcessImage): the image is
// cut into 2 to 9 crops of 640×640 (the local views) and also padded to
// one 1024×1024 global view; and model_sam.go: SAM's 16-pixel patches,
// then two stride-2 convolutions (net_2, net_3: DeepSeek-OCR's 3×3
// kernels with a pixel of padding halve a side, rounding up), so a side
// of s pixels becomes s/64 embeddings.
const (
	deepseekocrCrop       = 640
	deepseekocrBase       = 1024
	deepseekocrMinCrops   = 2
	deepseekocrMaxCrops   = 9
	deepseekocrPixelsEach = 16 * 2 * 2
)

// deepseekocrImages: DeepSeek-OCR's images cost by the grid of crops
// their aspect ratio picks, and nothing else; the rule reads no key (the
// processor and the model code fix every size).
//
// EncodeMultimodal (model.go) lays the crops' embeddings out as one
// picture, 10 per crop side: rows of 10·x embeddings each followed by
// the image_newline embedding, 10·y rows (x crops across, y down); then
// the global view, 16 rows of 16 plus a newline each; then the
// view_separator embedding. PostTokenize puts one token (128815) per
// embedding, and no other.
func deepseekocrImages(map[string]any) imageCoster {
	return func(img chat.Image) (int, bool) {
		if !img.Known() {
			return deepseekocrCost(1024, 768), false
		}
		return deepseekocrCost(img.Width, img.Height), true
	}
}

// deepseekocrCost is the tokens of a width×height image.
func deepseekocrCost(width, height int) int {
	x, y := deepseekocrCrops(width, height)
	local := deepseekocrCrop / deepseekocrPixelsEach
	global := deepseekocrBase / deepseekocrPixelsEach
	return (local*x+1)*(local*y) + (global+1)*global + 1
}

// deepseekocrCrops returns the crops across (x) and down (y) Ollama's
// processor cuts a width×height image into: of the grids of 2 to 9
// crops, in the order it lists them (by the larger side n = 2…9, then x
// and y up to n, each grid once), the first whose x/y is nearest the
// image's aspect ratio; a later grid as near replaces it when the image
// has more than half the pixels of the grid found so far
// (findBestAspectRatio; unlike the Python processor, the list is not
// sorted by the grids' sizes).
func deepseekocrCrops(width, height int) (x, y int) {
	best := [2]int{1, 1}
	bestDiff := math.MaxFloat64
	ratio := float64(width) / float64(height)
	var seen [deepseekocrMaxCrops + 1][deepseekocrMaxCrops + 1]bool
	for n := deepseekocrMinCrops; n <= deepseekocrMaxCrops; n++ {
		for i := 1; i <= n; i++ {
			for j := 1; j <= n; j++ {
				if i*j > deepseekocrMaxCrops || i*j < deepseekocrMinCrops || seen[i][j] {
					continue
				}
				seen[i][j] = true
				diff := math.Abs(ratio - float64(i)/float64(j))
				switch {
				case diff < bestDiff:
					bestDiff, best = diff, [2]int{i, j}
				case diff == bestDiff && float64(width*height) > 0.5*float64(deepseekocrCrop*deepseekocrCrop*best[0]*best[1]):
					best = [2]int{i, j}
				}
			}
		}
	}
	return best[0], best[1]
}

// deepseekocrServerImages: on llama-server (Ollama 0.30 and later) clip's
// "deepseekocr" projector fixes the same sizes (16-pixel patches, a
// 1024-pixel global view, 640-pixel tiles, 2 to 9 of them): the global
// view is 16 rows of 16 plus a newline each and a view separator (273),
// and an image larger than a tile on a side adds its grid's tiles, each
// row of x tiles 10 rows of 10·x + 1. The grid is clip's
// (deepseekocrServerCrops). mtmd writes "\n" after the image.
func deepseekocrServerImages(_ map[string]any, text func(string) int) imageCoster {
	newline := text("\n")
	global := deepseekocrBase / deepseekocrPixelsEach
	local := deepseekocrCrop / deepseekocrPixelsEach
	return func(img chat.Image) (int, bool) {
		known := img.Known()
		if !known {
			img = chat.Image{Width: 1024, Height: 768}
		}
		n := (global+1)*global + 1 + newline
		if img.Width > deepseekocrCrop || img.Height > deepseekocrCrop {
			x, y := deepseekocrServerCrops(img.Width, img.Height)
			n += (local*x + 1) * (local * y)
		}
		return n, known
	}
}

// deepseekocrServerCrops returns the grid clip cuts a width×height image
// into: of the grids of 2 to 9 tiles, listed by their tiles (fewest
// first), the first whose x/y is nearest the image's aspect ratio, in
// single precision; a later grid as near replaces it when the image has
// more than half that later grid's pixels.
func deepseekocrServerCrops(width, height int) (x, y int) {
	var grids [][2]int
	for n := deepseekocrMinCrops; n <= deepseekocrMaxCrops; n++ {
		for i := 1; i <= n; i++ {
			for j := 1; j <= n; j++ {
				if i*j >= deepseekocrMinCrops && i*j <= deepseekocrMaxCrops && !slices.Contains(grids, [2]int{i, j}) {
					grids = append(grids, [2]int{i, j})
				}
			}
		}
	}
	slices.SortStableFunc(grids, func(a, b [2]int) int { return a[0]*a[1] - b[0]*b[1] })
	best, bestDiff := [2]int{1, 1}, float32(math.MaxFloat32)
	ratio := float32(width) / float32(height)
	area := float32(width * height)
	for _, g := range grids {
		diff := float32(math.Abs(float64(ratio - float32(g[0])/float32(g[1]))))
		switch {
		case diff < bestDiff:
			bestDiff, best = diff, g
		case diff == bestDiff && area > 0.5*float32(deepseekocrCrop*deepseekocrCrop*g[0]*g[1]):
			best = g
		}
	}
	return best[0], best[1]
}
