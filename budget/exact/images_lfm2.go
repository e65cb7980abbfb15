package exact

import (
	"fmt"
	"math"
	"slices"

	"github.com/ctxproxy/ctxproxy/chat"
)

// lfm2Vision is what decides an image's cost to an LFM2-VL model on
// Ollama's engine (Ollama v0.17.4 model/models/lfm2: process_image.go
// sizes and tiles the image, model_vision.go merges the patches,
// model.go's PostTokenize writes the markers), read from model_info
// with the defaults of its image processor.
type lfm2Vision struct {
	// patch is vision.patch_size; scale the processor's
	// vision.projector.scale_factor and merge the projector's (they
	// differ only where the key says 0: the processor takes 2, the
	// projector 1).
	patch, scale, merge int
	// tile is vision.tile_size, the side of each tile of a split image.
	tile int
	// minTokens and maxTokens bound an unsplit image's tokens
	// (vision.min_image_tokens, vision.max_image_tokens), tolerance is
	// how far past maxTokens' pixels an image may be before it is split
	// (vision.max_pixels_tolerance).
	minTokens, maxTokens int
	tolerance            float64
	// split is vision.do_image_splitting; minTiles and maxTiles bound
	// the tiles of a split image; thumbnail (vision.use_thumbnail) adds
	// the whole image, resized, after the tiles.
	split              bool
	minTiles, maxTiles int
	thumbnail          bool
	// start, end and thumbMark are 1 where the model writes
	// <|image_start|>, <|image_end|> and <|img_thumbnail|>; grid is the
	// side of the <|img_row_R_col_C|> markers the model looks up
	// (vision.max_tiles) and rowCol says which the vocabulary holds.
	start, end, thumbMark int
	grid                  int
	rowCol                map[[2]int]bool
}

// lfm2Images: an LFM2-VL image costs its patches merged scale×scale,
// plus markers. An image of at most max_image_tokens' pixels (times
// max_pixels_tolerance) is resized whole to multiples of patch×scale
// between min_image_tokens and max_image_tokens; a larger one (with
// do_image_splitting) is cut into a grid of tile_size tiles, the grid
// whose aspect ratio is nearest the image's among those of min_tiles to
// max_tiles tiles, each tile preceded by its <|img_row_R_col_C|> marker,
// then the whole image resized as above after <|img_thumbnail|>; all
// between <|image_start|> and <|image_end|>. The marker ids come from
// the vision.image_*_token_id keys or, without, from the vocabulary.
func lfm2Images(kv map[string]any) imageCoster {
	v := newLFM2Vision(kv)
	return func(img chat.Image) (int, bool) {
		if !img.Known() {
			// A 1024×768 photo's cost: an estimate.
			return v.cost(1024, 768), false
		}
		return v.cost(img.Width, img.Height), true
	}
}

func newLFM2Vision(kv map[string]any) lfm2Vision {
	arch, _ := kv["general.architecture"].(string)
	key := func(k string) any { return kv[arch+".vision."+k] }
	uintOr := func(k string, def int) int {
		if n, ok := number(key(k)); ok {
			return n
		}
		return def
	}
	positive := func(n, def int) int {
		if n <= 0 {
			return def
		}
		return n
	}
	v := lfm2Vision{
		patch:     positive(uintOr("patch_size", 16), 16),
		scale:     positive(uintOr("projector.scale_factor", 2), 2),
		merge:     max(uintOr("projector.scale_factor", 2), 1),
		tile:      positive(uintOr("tile_size", 512), 512),
		minTokens: positive(uintOr("min_image_tokens", 64), 64),
		maxTokens: uintOr("max_image_tokens", 256),
		tolerance: 2,
		split:     boolOr(key("do_image_splitting"), true),
		minTiles:  positive(uintOr("min_tiles", 2), 2),
		maxTiles:  uintOr("max_tiles", 10),
		thumbnail: boolOr(key("use_thumbnail"), true),
		grid:      positive(uintOr("max_tiles", 10), 10),
	}
	v.maxTiles = max(v.maxTiles, v.minTiles)
	v.maxTokens = max(v.maxTokens, v.minTokens)
	if f, ok := key("max_pixels_tolerance").(float64); ok && f > 0 {
		// The server reads a float32.
		v.tolerance = float64(float32(f))
	}
	if !boolOr(key("use_image_special_tokens"), true) {
		return v // no markers at all
	}
	vocab := strings_(kv[keyTokens])
	id := func(k, token string) int {
		if n, ok := number(key(k)); ok && n != 0 {
			return n
		}
		return max(slices.Index(vocab, token), 0) // id 0 counts as absent
	}
	has := func(k, token string) int {
		if id(k, token) > 0 {
			return 1
		}
		return 0
	}
	v.start = has("image_start_token_id", "<|image_start|>")
	v.end = has("image_end_token_id", "<|image_end|>")
	v.thumbMark = has("image_thumbnail_token_id", "<|img_thumbnail|>")
	v.rowCol = map[[2]int]bool{}
	for r := 1; r <= v.grid; r++ {
		for c := 1; c <= v.grid; c++ {
			if slices.Index(vocab, fmt.Sprintf("<|img_row_%d_col_%d|>", r, c)) > 0 {
				v.rowCol[[2]int{r, c}] = true
			}
		}
	}
	return v
}

// cost returns the prompt tokens of a w×h image.
func (v lfm2Vision) cost(w, h int) int {
	n := v.start + v.end
	if !v.splits(w, h) {
		return n + v.tokens(v.resized(w, h))
	}
	cols, rows := v.tiles(w, h)
	if cols*rows == 1 {
		return n + v.tokens(v.tile, v.tile) // one tile, no markers
	}
	for r := 1; r <= rows; r++ {
		for c := 1; c <= cols; c++ {
			if v.rowCol[[2]int{r, c}] {
				n++
			}
			n += v.tokens(v.tile, v.tile)
		}
	}
	if v.thumbnail {
		n += v.thumbMark + v.tokens(v.resized(w, h))
	}
	return n
}

// tokens returns the embeddings of a w×h image after the vision tower
// (one per patch) and the projector (scale×scale patches merged, the
// grid padded to whole merges).
func (v lfm2Vision) tokens(w, h int) int {
	pw, ph := w/v.patch, h/v.patch
	ceil := func(a int) int { return (a + v.merge - 1) / v.merge }
	return ceil(pw) * ceil(ph)
}

// roundTo rounds n to the nearest multiple of f, halves to even.
func (v lfm2Vision) roundTo(n, f int) int {
	return int(math.RoundToEven(float64(n)/float64(f))) * f
}

// splits reports whether a w×h image is cut into tiles: splitting is on,
// more than one tile is allowed, and its size rounded to the merged
// patches passes max_image_tokens' pixels times the tolerance.
func (v lfm2Vision) splits(w, h int) bool {
	if !v.split || v.minTiles == 1 && v.maxTiles == 1 {
		return false
	}
	f := v.patch * v.scale
	hb, wb := max(v.patch, v.roundTo(h, f)), max(v.patch, v.roundTo(w, f))
	limit := float64(v.maxTokens*v.patch*v.patch*v.scale*v.scale) * v.tolerance
	return float64(hb*wb) > limit
}

// resized returns the size an image is resized to whole: each side
// rounded to a multiple of patch×scale, then, when that is more pixels
// than max_image_tokens' or fewer than min_image_tokens', scaled to fit
// (down rounding down, up rounding up). It is not the Qwen processors'
// smartResize: LFM2's keeps each side at least one multiple, before it
// compares the pixels and after it scales down, so a side that rounds
// to nothing is one multiple here where smartResize would scale the
// image up.
func (v lfm2Vision) resized(w, h int) (int, int) {
	f := v.patch * v.scale
	pixels := func(tokens int) int { return tokens * v.patch * v.patch * v.scale * v.scale }
	hb, wb := max(f, v.roundTo(h, f)), max(f, v.roundTo(w, f))
	switch area := float64(h * w); {
	case hb*wb > pixels(v.maxTokens):
		beta := math.Sqrt(area / float64(pixels(v.maxTokens)))
		hb = max(f, int(math.Floor(float64(h)/beta/float64(f)))*f)
		wb = max(f, int(math.Floor(float64(w)/beta/float64(f)))*f)
	case hb*wb < pixels(v.minTokens):
		beta := math.Sqrt(float64(pixels(v.minTokens)) / area)
		hb = int(math.Ceil(float64(h)*beta/float64(f))) * f
		wb = int(math.Ceil(float64(w)*beta/float64(f))) * f
	}
	return wb, hb
}

// tiles returns the grid a split w×h image is cut into: of the grids of
// min_tiles to max_tiles tiles, smallest first, the one whose aspect
// ratio is nearest the image's; on a tie the later one when the image
// has more than half its pixels.
func (v lfm2Vision) tiles(w, h int) (cols, rows int) {
	aspect := float64(w) / float64(h)
	best, bestDiff := [2]int{1, 1}, math.MaxFloat64
	for _, g := range v.grids() {
		switch d := math.Abs(aspect - float64(g[0])/float64(g[1])); {
		case d < bestDiff:
			best, bestDiff = g, d
		case d == bestDiff && float64(w*h) > 0.5*float64(v.tile*v.tile*g[0]*g[1]):
			best = g
		}
	}
	return best[0], best[1]
}

// grids returns the tile grids {columns, rows} the processor considers,
// in its order: for each bound n from min_tiles to max_tiles, the grids
// of at most n a side, without repeats, then sorted by tile count with
// the same (not stable) sort, so that grids of one count end in the
// processor's order among them.
func (v lfm2Vision) grids() [][2]int {
	var out [][2]int
	for n := v.minTiles; n <= v.maxTiles; n++ {
		for c := 1; c <= n; c++ {
			for r := 1; r <= n; r++ {
				if k := c * r; k >= v.minTiles && k <= v.maxTiles && !slices.Contains(out, [2]int{c, r}) {
					out = append(out, [2]int{c, r})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b [2]int) int { return a[0]*a[1] - b[0]*b[1] })
	return out
}
