package exact

import (
	"maps"
	"testing"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
)

// TestQwen25VLImages: Qwen 2.5 VL's rule follows Ollama v0.17.4's
// SmartResize on each branch (rounded to the nearest 28-pixel square,
// halves to even; scaled down past max_pixels; scaled up below 56×56),
// one token per square plus vision start and end, with the defaults and
// with the keys of a model that sets them (the e2e model's: 8-pixel
// patches, at most 100,000 pixels).
func TestQwen25VLImages(t *testing.T) {
	defaults := qwen25vlImages(map[string]any{"general.architecture": "qwen25vl"})
	small := qwen25vlImages(map[string]any{
		"general.architecture":               "qwen25vl",
		"qwen25vl.vision.block_count":        float64(1),
		"qwen25vl.vision.patch_size":         float64(8),
		"qwen25vl.vision.spatial_merge_size": float64(2),
		"qwen25vl.vision.max_pixels":         float64(100000),
	})
	for _, c := range []struct {
		name          string
		rule          imageCoster
		width, height int
		want          int
		exact         bool
	}{
		{"two squares a side", defaults, 56, 56, 2*2 + 2, true},
		{"one square, scaled up to 56×56", defaults, 28, 28, 2*2 + 2, true},
		{"3.5 squares round to 4", defaults, 98, 98, 4*4 + 2, true},
		{"2.5 and 1.5 squares round to 2 and 2 (halves to even)", defaults, 70, 42, 2*2 + 2, true},
		{"1.4 by 3.6 squares: 1×4, just 56×56 pixels", defaults, 100, 40, 1*4 + 2, true},
		{"a photo", defaults, 1024, 768, 27*37 + 2, true},
		{"wide and low", defaults, 1000, 30, 1*36 + 2, true},
		{"high and narrow", defaults, 30, 1000, 36*1 + 2, true},
		{"rounded above max_pixels, scaled down", defaults, 1920, 1080, 38*68 + 2, true},
		{"beyond max_pixels", defaults, 2048, 2048, 51*51 + 2, true},
		{"far beyond max_pixels", defaults, 4000, 3000, 44*59 + 2, true},
		{"aspect ratio 200, the most Ollama takes", defaults, 5600, 28, 1*200 + 2, true},
		{"aspect ratio 201: Ollama fails it", defaults, 5628, 28, 1*201 + 2, false},
		{"narrower than a square: Ollama fails it", defaults, 10, 10, 2*2 + 2, false},
		{"unknown: a 1024×768 photo's", defaults, 0, 0, 27*37 + 2, false},
		{"8-pixel patches: 56×56 is 3.5 squares, 4 each way", small, 56, 56, 4*4 + 2, true},
		{"8-pixel patches: 20×20 scaled up to 64×64", small, 20, 20, 4*4 + 2, true},
		{"8-pixel patches: 7.5 and 4.5 squares, to 8 and 4", small, 120, 72, 4*8 + 2, true},
		{"8-pixel patches: beyond 100,000 pixels", small, 600, 400, 16*24 + 2, true},
		{"8-pixel patches: a square beyond 100,000 pixels", small, 400, 400, 19*19 + 2, true},
		{"8-pixel patches: wide, under 100,000 pixels", small, 2000, 50, 3*125 + 2, true},
		{"8-pixel patches: odd sizes", small, 333, 77, 5*21 + 2, true},
	} {
		n, exact := c.rule(chat.Image{Width: c.width, Height: c.height})
		if n != c.want || exact != c.exact {
			t.Errorf("%s (%d×%d): %d, exact %v; want %d, exact %v", c.name, c.width, c.height, n, exact, c.want, c.exact)
		}
	}
	// A tower without blocks refuses images; a key that is no whole
	// number leaves the rule unknown.
	for _, kv := range []map[string]any{
		{"qwen25vl.vision.block_count": float64(0)},
		{"qwen25vl.vision.patch_size": "14"},
		{"qwen25vl.vision.spatial_merge_size": float64(0)},
		{"qwen25vl.vision.max_pixels": 1.5},
	} {
		if qwen25vlImages(kv) != nil {
			t.Errorf("%v: a rule", kv)
		}
	}
}

// TestQwen25VLCount: a Qwen 2.5 VL vision model's Count charges each
// image its own size's cost where its tag was, exactly when every size
// is known, and estimates them where the model has no tower.
func TestQwen25VLCount(t *testing.T) {
	kv := ollamaEngine(vocabgen.BPE(2000, "qwen2", 1).KV())
	kv["general.architecture"] = "qwen25vl"
	tmpl := "{{ range .Messages }}[{{ .Role }}]{{ .Content }}{{ end }}"
	m, err := New(Show{Version: ollama017, ModelInfo: maps.Clone(kv), Template: tmpl, Capabilities: []string{"completion", "vision"}})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []api.Message{{Role: "user", Content: "look", Images: []api.ImageData{{1}, {2}}}}
	head, _ := m.CountPrompt("[user]")
	tail, _ := m.CountText("look")
	sized := []chat.Image{{Width: 56, Height: 56}, {Width: 1024, Height: 768}}
	if n, exact, err := m.Count(Prompt{Messages: msgs, Images: sized}); err != nil || !exact || n != head+tail+6+1001 {
		t.Errorf("two sized images: %d, exact %v, %v; want %d, exact", n, exact, err, head+tail+6+1001)
	}
	if n, exact, _ := m.Count(Prompt{Messages: msgs, Images: sized[:1]}); exact || n != head+tail+6+1001 {
		t.Errorf("one size of two: %d, exact %v; want %d, an estimate", n, exact, head+tail+6+1001)
	}
	// A tower without blocks (as ggufgen writes the text model): the
	// server refuses images, ctxproxy estimates them.
	kv["qwen25vl.vision.block_count"] = float64(0)
	bare, err := New(Show{Version: ollama017, ModelInfo: kv, Template: tmpl, Capabilities: []string{"completion", "vision"}})
	if err != nil {
		t.Fatal(err)
	}
	if n, exact, _ := bare.Count(Prompt{Messages: msgs, Images: sized}); exact || n != head+tail+2*imageTokens {
		t.Errorf("no tower: %d, exact %v; want %d, an estimate", n, exact, head+tail+2*imageTokens)
	}
}
