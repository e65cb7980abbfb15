package exact

import (
	"testing"

	"github.com/ctxproxy/ctxproxy/chat"
)

// TestGLMOCRImages: GLM-OCR's rule follows Ollama v0.17.4's SmartResize
// (model/models/glmocr/imageprocessor.go) on every branch, with the
// processor's defaults and with a file's own pixel bounds: images
// narrower than a merged patch scaled up, below min_pixels scaled up,
// above max_pixels scaled down, exact multiples kept, odd aspect ratios
// rounded half to even.
func TestGLMOCRImages(t *testing.T) {
	defaults := imagesOf(map[string]any{"general.architecture": "glmocr"})
	// As ggufgen's GLM-OCR vision layout writes them: 2·56² to 2·224²
	// pixels, 14-pixel patches merged 2×2.
	small := imagesOf(map[string]any{"general.architecture": "glmocr",
		"glmocr.vision.block_count": float64(1), "glmocr.vision.patch_size": float64(14),
		"glmocr.vision.spatial_merge_size": float64(2), "glmocr.vision.temporal_patch_size": float64(2),
		"glmocr.vision.min_pixels": float64(6272), "glmocr.vision.max_pixels": float64(100352)})
	for _, c := range []struct {
		name       string
		cost       imageCoster
		w, h, want int
	}{
		{"1×1: scaled up to the min", defaults, 1, 1, 3*3 + 2},
		{"10×10", defaults, 10, 10, 3*3 + 2},
		{"27×27: short side below 28", defaults, 27, 27, 3*3 + 2},
		{"56×56: a multiple, below the min", defaults, 56, 56, 3*3 + 2},
		{"300×20: scaled up to a 28-pixel side", defaults, 300, 20, 1*15 + 2},
		{"20×300", defaults, 20, 300, 15*1 + 2},
		{"14×2800: tall and narrow", defaults, 14, 2800, 200*1 + 2},
		{"280×280: a multiple, kept", defaults, 280, 280, 10*10 + 2},
		{"1000×300: rounded", defaults, 1000, 300, 36*11 + 2},
		{"1280×720", defaults, 1280, 720, 46*26 + 2},
		{"2000×1500: above the max, scaled down", defaults, 2000, 1500, 52*39 + 2},
		{"small bounds 10×10", small, 10, 10, 2*2 + 2},
		{"small bounds 40×30", small, 40, 30, 2*3 + 2},
		{"small bounds 100×60", small, 100, 60, 4*2 + 2},
		{"small bounds 224×224: the max exactly", small, 224, 224, 8*8 + 2},
		{"small bounds 400×300: scaled down", small, 400, 300, 9*6 + 2},
		{"small bounds 300×400", small, 300, 400, 6*9 + 2},
		{"small bounds 1000×200", small, 1000, 200, 17*3 + 2},
	} {
		got, exact := c.cost(chat.Image{Width: c.w, Height: c.h})
		if got != c.want || !exact {
			t.Errorf("%s: %d (exact %v), want %d", c.name, got, exact, c.want)
		}
	}
	// An unknown size: a 1024×768 image's cost, as an estimate.
	if got, exact := defaults(chat.Image{}); got != 37*27+2 || exact {
		t.Errorf("unknown size: %d (exact %v), want %d estimated", got, exact, 37*27+2)
	}
	// A file whose tower has no blocks fails every image: no rule.
	if imagesOf(map[string]any{"general.architecture": "glmocr", "glmocr.vision.block_count": float64(0)}) != nil {
		t.Error("no tower: a rule")
	}
}
