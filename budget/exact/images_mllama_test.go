package exact

import (
	"testing"

	"github.com/ctxproxy/ctxproxy/chat"
)

// TestMllamaImages: every image costs Llama 3.2 Vision one token, exact,
// whatever its size, known or not, and whatever the tiling keys say.
func TestMllamaImages(t *testing.T) {
	kv := map[string]any{"general.architecture": "mllama", "mllama.vision.image_size": 560.0,
		"mllama.vision.max_num_tiles": 4.0}
	cost := imagesOf(kv)
	if cost == nil {
		t.Fatal("mllama has no rule")
	}
	for _, img := range []chat.Image{
		{},                            // unknown
		{Width: 1, Height: 1},         // tiny
		{Width: 560, Height: 560},     // one tile exactly
		{Width: 1120, Height: 560},    // two tiles
		{Width: 4000, Height: 3000},   // scaled down to the canvas
		{Width: 50, Height: 2000},     // tall and thin
		{Width: 1121, Height: 1121},   // just past four tiles
		{Width: 300, Height: 200},     // scaled up to a tile
		{Width: 10000, Height: 10000}, // huge
	} {
		if n, exact := cost(img); n != 1 || !exact {
			t.Errorf("%dx%d: %d tokens (exact %v), want 1, exact", img.Width, img.Height, n, exact)
		}
	}
}
