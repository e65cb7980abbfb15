package exact

import (
	"maps"
	"testing"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
)

// ollama034 is a llama-server Ollama.
const ollama034 = "0.34.3"

// serverVision makes a vision model of architecture arch with model_info
// keys extra, for Ollama version, on a small BPE vocabulary.
func serverVision(t *testing.T, version, arch string, extra map[string]any) *Tokenizer {
	t.Helper()
	kv := vocabgen.BPE(2000, "qwen2", 1).KV()
	kv["general.architecture"] = arch
	maps.Copy(kv, extra)
	m, err := New(Show{Version: version, ModelInfo: kv, Template: "{{ range .Messages }}[{{ .Role }}]{{ .Content }}{{ end }}", Capabilities: []string{"completion", "vision"}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// imageShare is what the images of one user message cost m beyond its
// text: the count less that of the same prompt without images.
func imageShare(t *testing.T, m *Tokenizer, sizes ...chat.Image) (int, bool) {
	t.Helper()
	images := make([]api.ImageData, len(sizes))
	for i := range images {
		images[i] = api.ImageData{byte(i)}
	}
	n, exact, err := m.Count(Prompt{Messages: []api.Message{{Role: "user", Content: "look", Images: images}}, Images: sizes})
	if err != nil {
		t.Fatal(err)
	}
	head, _ := m.CountPrompt("[user]")
	tail, _ := m.CountText("look")
	return n - head - tail, exact
}

// TestGemma3ServerImages: on llama-server a Gemma 3 image is clip's
// (image_size/patch_size)² patches pooled 4×4, plus <start_of_image> and
// <end_of_image>, whatever its size and mm_tokens_per_image; Ollama's
// engine keeps mm_tokens_per_image and four markers.
func TestGemma3ServerImages(t *testing.T) {
	keys := map[string]any{"gemma3.vision.image_size": float64(896), "gemma3.vision.patch_size": float64(14), "gemma3.mm_tokens_per_image": float64(64)}
	for _, c := range []struct {
		version string
		keys    map[string]any
		want    int
		exact   bool
	}{
		{ollama034, keys, 256 + 2, true},
		{ollama017, keys, 64 + 4, true},
		// The generated test model: 4×4 patches, one embedding.
		{ollama034, map[string]any{"gemma3.vision.image_size": float64(56), "gemma3.vision.patch_size": float64(14)}, 1 + 2, true},
		// No tower size: clip refuses it, ctxproxy estimates.
		{ollama034, map[string]any{"gemma3.mm_tokens_per_image": float64(64)}, imageTokens, false},
	} {
		m := serverVision(t, c.version, "gemma3", c.keys)
		for _, img := range []chat.Image{{Width: 56, Height: 56}, {Width: 1920, Height: 1080}, {}} {
			if n, exact := imageShare(t, m, img); n != c.want || exact != c.exact {
				t.Errorf("%s %v, image %v: %d, exact %v; want %d, exact %v", c.version, c.keys, img, n, exact, c.want, c.exact)
			}
		}
	}
}
