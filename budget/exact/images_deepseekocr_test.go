package exact

import (
	"testing"

	"github.com/ctxproxy/ctxproxy/chat"
)

// TestDeepSeekOCRImages: DeepSeek-OCR's rule picks Ollama v0.17.4's grid
// of 640-pixel crops (model/models/deepseekocr/imageprocessor.go,
// findBestAspectRatio: nearest aspect ratio, a later equal one for an
// image with over half the grid's pixels) and lays out 10×10 embeddings
// per crop with a newline per row, the 16×16 global view with its
// newlines, and the view separator.
func TestDeepSeekOCRImages(t *testing.T) {
	cost := imagesOf(map[string]any{"general.architecture": "deepseekocr"})
	const global = 17*16 + 1
	for _, c := range []struct {
		name       string
		w, h, x, y int
	}{
		{"10×10: tiny, the least square grid", 10, 10, 2, 2},
		{"640×640", 640, 640, 2, 2},
		{"905×905: under half of 3×3 crops' pixels", 905, 905, 2, 2},
		{"906×906: over half, the later square grid", 906, 906, 3, 3},
		{"1024×1024", 1024, 1024, 3, 3},
		{"600×300: 2:1, small", 600, 300, 2, 1},
		{"1000×500: 2:1, large enough for 4×2", 1000, 500, 4, 2},
		{"1200×800: 3:2", 1200, 800, 3, 2},
		{"800×1200: 2:3, rows differ from columns", 800, 1200, 2, 3},
		{"1024×768: 4:3 has no grid", 1024, 768, 3, 2},
		{"300×1000: tall", 300, 1000, 1, 3},
		{"5000×100: beyond every grid", 5000, 100, 9, 1},
		{"100×5000", 100, 5000, 1, 9},
	} {
		x, y := deepseekocrCrops(c.w, c.h)
		want := (10*c.x+1)*(10*c.y) + global
		got, exact := cost(chat.Image{Width: c.w, Height: c.h})
		if x != c.x || y != c.y || got != want || !exact {
			t.Errorf("%s: %d×%d crops, %d tokens (exact %v), want %d×%d, %d", c.name, x, y, got, exact, c.x, c.y, want)
		}
	}
	if got, exact := cost(chat.Image{}); got != 31*20+global || exact {
		t.Errorf("unknown size: %d (exact %v), want a 1024×768 image's %d estimated", got, exact, 31*20+global)
	}
}
