package exact

import (
	"testing"

	"github.com/ctxproxy/ctxproxy/chat"
)

// qwen3vlKV is model_info of arch with the vision keys given (absent
// ones take Ollama's defaults), numbers as /api/show's JSON has them.
func qwen3vlKV(arch string, vision map[string]float64) map[string]any {
	kv := map[string]any{"general.architecture": arch}
	for k, v := range vision {
		kv[arch+".vision."+k] = v
	}
	return kv
}

// TestQwen3VLImages: an image costs one token per factor×factor square
// of its resized size plus vision start and end, as Ollama v0.17.4's
// SmartResize (model/models/qwen3vl/imageprocessor.go) resizes it: the
// sides rounded to multiples of factor (halves to even), scaled up to
// shortest_edge pixels, down to 2 MiB-pixels whatever longest_edge
// says. The wanted counts were worked out with Ollama's own SmartResize.
func TestQwen3VLImages(t *testing.T) {
	defaults := qwen3vlKV("qwen3vl", nil) // patch 14, merge 2: factor 28
	patch16 := qwen3vlKV("qwen3vlmoe", map[string]float64{"patch_size": 16, "spatial_merge_size": 2, "longest_edge": 16 << 20})
	noMin := qwen3vlKV("qwen3vl", map[string]float64{"shortest_edge": 0})
	min40k := qwen3vlKV("qwen35", map[string]float64{"block_count": 1, "patch_size": 16, "shortest_edge": 40000})
	for _, c := range []struct {
		name  string
		kv    map[string]any
		w, h  int
		want  int
		exact bool
	}{
		{"one square, scaled up to 65,536 pixels", defaults, 28, 28, 10*10 + 2, true},
		{"a multiple of 28", defaults, 448, 448, 16*16 + 2, true},
		{"wide, rounded", defaults, 1000, 300, 36*11 + 2, true},
		{"4:3, rounded", defaults, 1024, 768, 37*27 + 2, true},
		{"square beyond 2 MiB-pixels", defaults, 2048, 2048, 51*51 + 2, true},
		{"4:3 beyond 2 MiB-pixels", defaults, 4000, 3000, 59*44 + 2, true},
		{"200 times as wide as high", defaults, 5600, 28, 200 + 2, true},
		{"more than 200 times as wide (the server fails it)", defaults, 6000, 28, 214 + 2, false},
		{"narrower than a square (the server fails it)", defaults, 20, 20, 10*10 + 2, false},
		{"one pixel (the server fails it)", defaults, 1, 1, 10*10 + 2, false},
		{"unknown size: as 1024×768", defaults, 0, 0, 37*27 + 2, false},
		{"patch 16: one square, scaled up", patch16, 32, 32, 8*8 + 2, true},
		{"patch 16: 1.2 M-pixels, below the fixed 2 MiB", patch16, 1200, 1000, 38*31 + 2, true},
		{"patch 16: 3 M-pixels, scaled down although longest_edge is 16 Mi", patch16, 2000, 1500, 52*39 + 2, true},
		{"patch 16: tall and small, scaled up", patch16, 50, 700, 3*30 + 2, true},
		{"patch 16: a multiple of 32", patch16, 512, 512, 16*16 + 2, true},
		{"no minimum: 1.5 and 2.5 squares round to 2", noMin, 70, 42, 2*2 + 2, true},
		{"no minimum: 3.5 and 4.5 squares round to 4", noMin, 126, 98, 4*4 + 2, true},
		{"no minimum: one square", noMin, 28, 28, 1 + 2, true},
		{"shortest_edge 40,000: square", min40k, 64, 64, 7*7 + 2, true},
		{"shortest_edge 40,000: 3:2", min40k, 150, 100, 8*6 + 2, true},
	} {
		cost := imagesOf(c.kv)
		if cost == nil {
			t.Errorf("%s: no rule", c.name)
			continue
		}
		got, exact := cost(chat.Image{Width: c.w, Height: c.h})
		if got != c.want || exact != c.exact {
			t.Errorf("%s: %d×%d costs %d (exact %v), want %d (exact %v)", c.name, c.w, c.h, got, exact, c.want, c.exact)
		}
	}
}

// TestQwen3VLImagesWithoutTower: a model whose tower has no blocks fails
// every image on the server, and a Qwen3-Next or Qwen 3.5 has none unless
// vision.block_count says so, while Qwen 3 VL's default is 32 blocks.
func TestQwen3VLImagesWithoutTower(t *testing.T) {
	for _, c := range []struct {
		kv   map[string]any
		rule bool
	}{
		{qwen3vlKV("qwen3vl", nil), true},
		{qwen3vlKV("qwen3vl", map[string]float64{"block_count": 0}), false},
		{qwen3vlKV("qwen3vlmoe", map[string]float64{"block_count": 2}), true},
		{qwen3vlKV("qwen3next", nil), false},
		{qwen3vlKV("qwen35", map[string]float64{"block_count": 0}), false},
		{qwen3vlKV("qwen35moe", map[string]float64{"block_count": 27}), true},
		{qwen3vlKV("qwen35", map[string]float64{"block_count": 1, "patch_size": 0}), false},
	} {
		if got := imagesOf(c.kv) != nil; got != c.rule {
			t.Errorf("%v: a rule %v, want %v", c.kv, got, c.rule)
		}
	}
}
