package exact

import (
	"testing"

	"github.com/ctxproxy/ctxproxy/chat"
)

// TestLlama4Images: Llama 4's image cost for sizes that pick each kind of
// canvas, with Llama 4's keys (336-pixel tiles, 14-pixel patches, a
// pixel shuffle of 0.5: 144 patches a tile, at most 14 tiles) and with a
// generated model's (56-pixel tiles: 4 patches a tile).
func TestLlama4Images(t *testing.T) {
	llama4 := llama4Images(map[string]any{
		"llama4.vision.image_size":          float64(336),
		"llama4.vision.patch_size":          float64(14),
		"llama4.vision.pixel_shuffle_ratio": float64(0.5),
	})
	defaults := llama4Images(map[string]any{})
	small := llama4Images(map[string]any{
		"llama4.vision.image_size":          float64(56),
		"llama4.vision.patch_size":          float64(14),
		"llama4.vision.pixel_shuffle_ratio": float64(0.5),
	})
	quarter := llama4Images(map[string]any{"llama4.vision.pixel_shuffle_ratio": float64(0.25)})
	// one tile: patches + 3; n tiles: n·(patches+1) + patches + 3
	one, tiles := func(p int) int { return p + 3 }, func(n, p int) int { return n*(p+1) + p + 3 }
	for _, c := range []struct {
		name string
		rule imageCoster
		w, h int
		want int
	}{
		{"exactly one tile", llama4, 336, 336, one(144)},
		{"tiny, scaled up to one tile", llama4, 14, 14, one(144)},
		{"small, one tile beats a larger canvas of the same scale", llama4, 100, 100, one(144)},
		{"two tiles across", llama4, 672, 336, tiles(2, 144)},
		{"one pixel over a tile: 2×2", llama4, 337, 337, tiles(4, 144)},
		{"typical photo: 4×3", llama4, 1024, 768, tiles(12, 144)},
		{"wide: 3×1", llama4, 1000, 200, tiles(3, 144)},
		{"beyond every canvas: scaled down to 3×3", llama4, 5000, 5000, tiles(9, 144)},
		{"very wide: 14×1, the most tiles", llama4, 10000, 100, tiles(14, 144)},
		{"very tall: 1×14", llama4, 100, 5000, tiles(14, 144)},
		{"keys missing: Llama 4's", defaults, 1024, 768, tiles(12, 144)},
		{"a pixel shuffle of 0.25: 36 patches", quarter, 336, 336, one(36)},
		{"small model, one tile", small, 56, 56, one(4)},
		{"small model, 2×1", small, 112, 56, tiles(2, 4)},
		{"small model, 7×2", small, 390, 100, tiles(14, 4)},
		{"small model, scaled down to 3×3", small, 300, 300, tiles(9, 4)},
	} {
		if got, exact := c.rule(chat.Image{Width: c.w, Height: c.h}); got != c.want || !exact {
			t.Errorf("%s (%d×%d): %d, exact %v; want %d, exact", c.name, c.w, c.h, got, exact, c.want)
		}
	}
	if got, exact := llama4(chat.Image{Height: 10}); got != tiles(12, 144) || exact {
		t.Errorf("unknown size: %d, exact %v; want %d (a 1024×768 photo), an estimate", got, exact, tiles(12, 144))
	}
}
