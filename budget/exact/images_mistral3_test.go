package exact

import (
	"testing"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
)

// TestMistral3Images: Mistral 3's image cost for sizes that reach every
// branch of Ollama's processor, with its defaults (longest edge 1540,
// 14-pixel patches merged 2×2) and with a generated model's keys.
func TestMistral3Images(t *testing.T) {
	defaults := mistral3Images(map[string]any{"general.architecture": "mistral3"})
	small := mistral3Images(map[string]any{
		"mistral3.vision.longest_edge": float64(224),
		"mistral3.vision.patch_size":   float64(14),
		"mistral3.spatial_merge_size":  float64(2),
	})
	for _, c := range []struct {
		name string
		rule imageCoster
		w, h int
		want int
	}{
		// patches per side, merged, rows × (columns + 1)
		{"two merged patches per side", defaults, 56, 56, 2 * 3},
		{"one merged patch", defaults, 28, 28, 1 * 2},
		{"padded up to whole patches", defaults, 15, 15, 1 * 2},
		{"tiny, padded up", defaults, 20, 20, 1 * 2},
		{"odd patches: the last row and column dropped", defaults, 42, 70, 2 * 2},
		{"typical photo, not resized", defaults, 1024, 768, 27 * 38},
		{"exactly the longest edge", defaults, 1540, 1540, 55 * 56},
		{"one pixel over: scaled to 1539", defaults, 1541, 1541, 55 * 56},
		{"wide, scaled to 1540×770", defaults, 3080, 1540, 27 * 56},
		{"tall, scaled to 51×1540", defaults, 100, 3000, 55 * 3},
		{"small model, square", small, 56, 56, 2 * 3},
		{"small model, 120×72", small, 120, 72, 3 * 5},
		{"small model, scaled to 224×74", small, 300, 100, 3 * 9},
		{"small model, scaled to 224×223", small, 1000, 999, 8 * 9},
		{"small model, exactly the edge", small, 224, 224, 8 * 9},
	} {
		if got, exact := c.rule(chat.Image{Width: c.w, Height: c.h}); got != c.want || !exact {
			t.Errorf("%s (%d×%d): %d, exact %v; want %d, exact", c.name, c.w, c.h, got, exact, c.want)
		}
	}
	// Fewer than a merge's patches on a side: the runner fails on the
	// image, so the cost is no count to match.
	for _, c := range []struct{ w, h, want int }{{14, 14, 0}, {4000, 10, 0}, {10, 100, 4}} {
		if got, exact := defaults(chat.Image{Width: c.w, Height: c.h}); got != c.want || exact {
			t.Errorf("%d×%d: %d, exact %v; want %d, not exact", c.w, c.h, got, exact, c.want)
		}
	}
	// Size unknown: a 1024×768 photo's cost, an estimate.
	if got, exact := defaults(chat.Image{}); got != 27*38 || exact {
		t.Errorf("unknown size: %d, exact %v; want %d, an estimate", got, exact, 27*38)
	}
	if got, exact := small(chat.Image{Width: 640}); got != 6*9 || exact {
		t.Errorf("unknown height on the small model: %d, exact %v; want %d (224×168), an estimate", got, exact, 6*9)
	}
	// Keys that are zero or not numbers are Ollama's defaults.
	odd := mistral3Images(map[string]any{"mistral3.vision.patch_size": float64(0), "mistral3.spatial_merge_size": "2"})
	if got, _ := odd(chat.Image{Width: 56, Height: 56}); got != 6 {
		t.Errorf("zero and text keys: %d, want the defaults' 6", got)
	}
}

// TestMistral3Count: a mistral3 model with the vision capability counts
// each image by the rule, exactly, where its tag was.
func TestMistral3Count(t *testing.T) {
	kv := vocabgen.BPE(2000, "tekken", 1).KV()
	kv["general.architecture"] = "mistral3"
	tmpl := "{{ range .Messages }}[INST]{{ .Content }}[/INST]{{ end }}"
	m, err := New(Show{Version: ollama017, ModelInfo: kv, Template: tmpl, Capabilities: []string{"completion", "vision"}})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []api.Message{{Role: "user", Content: "look", Images: []api.ImageData{{1}, {2}}}}
	n, exact, err := m.Count(Prompt{Messages: msgs, Images: []chat.Image{{Width: 56, Height: 56}, {Width: 3080, Height: 1540}}})
	head, _ := m.CountPrompt("[INST]")
	tail, _ := m.CountText("look[/INST]")
	if want := head + tail + 6 + 27*56; err != nil || !exact || n != want {
		t.Errorf("two images: %d, exact %v, %v; want %d, exact", n, exact, err, want)
	}
}
