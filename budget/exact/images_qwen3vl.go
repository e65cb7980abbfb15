package exact

import (
	"github.com/ctxproxy/ctxproxy/chat"
)

// Qwen 3 VL (qwen3vl, qwen3vlmoe) and the Qwen3-Next family that borrows
// its vision tower (qwen3next, qwen35, qwen35moe) cost an image by its
// size. Ollama v0.17.4 model/models/qwen3vl/imageprocessor.go resizes it
// to multiples of factor = vision.patch_size × vision.spatial_merge_size
// pixels (SmartResize), the tower cuts it into patches and the merger
// joins each merge×merge square of them into one embedding: an image of
// h×w resized pixels is (h/factor)·(w/factor) embeddings, between the
// two tokens PostTokenize puts around them (vision start and vision end;
// model/models/qwen3vl/model.go and model/models/qwen3next/model.go).

// qwen3vlLongestEdge is the most pixels a resized image may have: Ollama
// v0.17.4's processor fixes it at 2 MiB-pixels whatever the file's
// vision.longest_edge says (imageprocessor.go, NewImageProcessor).
const qwen3vlLongestEdge = 2 << 20

// qwen3vlImages: Qwen 3 VL's images (qwen3vl and qwen3vlmoe, one model
// code). Ollama builds its tower with 32 blocks unless
// vision.block_count says otherwise.
func qwen3vlImages(kv map[string]any) imageCoster { return qwen3vlFamilyImages(kv, 32) }

// qwen3nextImages: Qwen3-Next's and Qwen 3.5's images (qwen3next, qwen35,
// qwen35moe, one model code), with Qwen 3 VL's processor: the model has a
// tower only where vision.block_count is above 0 (its default).
func qwen3nextImages(kv map[string]any) imageCoster { return qwen3vlFamilyImages(kv, 0) }

// qwen3vlFamilyImages makes the rule from the keys Ollama's processor
// reads under the architecture's name, with its defaults: patch_size 14,
// spatial_merge_size 2, shortest_edge 65,536 pixels. A model without a
// tower (vision.block_count 0, blocks its default) fails every image on
// the server: nil, ctxproxy does not know what it costs.
func qwen3vlFamilyImages(kv map[string]any, blocks int) imageCoster {
	arch, _ := kv["general.architecture"].(string)
	key := func(name string, def int) int {
		v, ok := kv[arch+".vision."+name]
		if !ok {
			return def
		}
		n, _ := number(v)
		return n
	}
	if key("block_count", blocks) <= 0 {
		return nil
	}
	g := qwen3vlGrid{factor: key("patch_size", 14) * key("spatial_merge_size", 2), shortest: key("shortest_edge", 64<<10)}
	if g.factor <= 0 {
		return nil
	}
	return g.cost
}

// qwen3vlGrid is the processor's resize rule: images are cut in squares
// of factor pixels and kept between shortest and qwen3vlLongestEdge
// pixels.
type qwen3vlGrid struct {
	factor, shortest int
}

// cost is an image's tokens: one per factor×factor square of the resized
// image, plus vision start and vision end. An image of unknown size is
// estimated as 1024×768. Ollama's processor panics on an image narrower
// or lower than factor pixels or more than 200 times as wide as high (or
// high as wide), and the request fails: such an image is estimated as
// if its short side were factor pixels.
func (g qwen3vlGrid) cost(img chat.Image) (int, bool) {
	if !img.Known() {
		n, _ := g.cost(chat.Image{Width: 1024, Height: 768})
		return n, false
	}
	h, w := img.Height, img.Width
	exact := h >= g.factor && w >= g.factor && max(h, w)/min(h, w) <= 200
	rows, cols := smartResize(max(h, g.factor), max(w, g.factor), g.factor, 1, g.shortest, qwen3vlLongestEdge)
	return rows*cols + 2, exact
}

// qwen3vlServerImages: on llama-server (Ollama 0.30 and later) Qwen 3
// VL's images (qwen3vl, qwen3vlmoe; clip's qwen3vl_merger) are sized as
// Qwen 2.5 VL's (qwenVLServer), at least 1024 squares (Ollama's
// --image-min-tokens for them); shortest_edge and longest_edge are not
// read.
func qwen3vlServerImages(kv map[string]any, text func(string) int) imageCoster {
	arch, _ := kv["general.architecture"].(string)
	return qwenVLServer(kv, text, arch, 1024)
}

// qwen35ServerImages: on llama-server Qwen 3.5's images (qwen35,
// qwen35moe, whose tower Ollama's compatibility layer hands clip as a
// qwen3vl_merger) are sized as Qwen 3 VL's, but Ollama sets no
// --image-min-tokens for them: clip's own minimum of 8 squares. (Ollama's
// layer does not translate qwen3next's tower: it stays an estimate.)
func qwen35ServerImages(kv map[string]any, text func(string) int) imageCoster {
	arch, _ := kv["general.architecture"].(string)
	return qwenVLServer(kv, text, arch, 8)
}
