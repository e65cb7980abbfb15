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

// serverMarkers are the marker tokens mtmd writes around images, which
// serverVision's vocabulary holds as special tokens.
var serverMarkers = []string{"<start_of_image>", "<end_of_image>", "<|vision_start|>", "<|vision_end|>", "[IMG_BREAK]", "[IMG_END]", "<|image_start|>", "<|image_end|>", "<|begin_of_image|>", "<|end_of_image|>"}

// serverVision makes a vision model of architecture arch with model_info
// keys extra, for Ollama version, on a small BPE vocabulary that holds
// serverMarkers.
func serverVision(t *testing.T, version, arch string, extra map[string]any) *Tokenizer {
	t.Helper()
	kv := vocabgen.BPE(2000, "qwen2", 1).WithSpecials(serverMarkers...).KV()
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
	// A vocabulary without the markers as special tokens: mtmd tokenizes
	// their text, and so does ctxproxy.
	kv := vocabgen.BPE(2000, "qwen2", 1).KV()
	kv["general.architecture"] = "gemma3"
	maps.Copy(kv, keys)
	m, err := New(Show{Version: ollama034, ModelInfo: kv, Template: "{{ range .Messages }}[{{ .Role }}]{{ .Content }}{{ end }}", Capabilities: []string{"vision"}})
	if err != nil {
		t.Fatal(err)
	}
	begin, _ := m.CountText("<start_of_image>")
	end, _ := m.CountText("<end_of_image>")
	if n, exact := imageShare(t, m, chat.Image{Width: 56, Height: 56}); begin < 2 || n != 256+begin+end || !exact {
		t.Errorf("gemma3, markers as text: %d, exact %v; want %d+%d+%d", n, exact, 256, begin, end)
	}
}

// TestQwenVLServerImages: on llama-server the Qwen-VL families' images
// are clip's squares of patch_size × spatial_merge_size pixels, at least
// 1024 of them for qwen25vl and qwen3vl (Ollama's --image-min-tokens), 8
// for qwen35, at most 4096, plus vision start and end; the sizes were
// worked out apart from the rule, in single precision as clip does.
func TestQwenVLServerImages(t *testing.T) {
	real := func(arch string) map[string]any {
		return map[string]any{arch + ".vision.patch_size": float64(14), arch + ".vision.spatial_merge_size": float64(2), arch + ".vision.max_pixels": float64(1 << 20)}
	}
	gen := func(arch string) map[string]any {
		return map[string]any{arch + ".vision.patch_size": float64(16), arch + ".vision.spatial_merge_size": float64(2)}
	}
	for _, c := range []struct {
		arch string
		keys map[string]any
		img  chat.Image
		want int
	}{
		{"qwen25vl", real("qwen25vl"), chat.Image{Width: 1920, Height: 1080}, 69*39 + 2},
		{"qwen25vl", real("qwen25vl"), chat.Image{Width: 640, Height: 480}, 37*28 + 2},
		{"qwen25vl", real("qwen25vl"), chat.Image{Width: 4000, Height: 3000}, 73*55 + 2},
		{"qwen25vl", real("qwen25vl"), chat.Image{Width: 10, Height: 10}, 32*32 + 2},
		{"qwen25vl", real("qwen25vl"), chat.Image{Width: 3000, Height: 20}, 392*3 + 2},
		// The e2e suite's generated models (16-pixel patches).
		{"qwen25vl", map[string]any{"qwen25vl.vision.patch_size": float64(8)}, chat.Image{Width: 120, Height: 72}, 42*25 + 2},
		{"qwen25vl", map[string]any{"qwen25vl.vision.patch_size": float64(8)}, chat.Image{Width: 2000, Height: 50}, 203*6 + 2},
		{"qwen3vl", gen("qwen3vl"), chat.Image{Width: 333, Height: 77}, 67*16 + 2},
		{"qwen3vlmoe", gen("qwen3vlmoe"), chat.Image{Width: 2000, Height: 1500}, 63*47 + 2},
		{"qwen35", gen("qwen35"), chat.Image{Width: 100, Height: 60}, 4*3 + 2},
		{"qwen35", gen("qwen35"), chat.Image{Width: 208, Height: 176}, 7*6 + 2},
		{"qwen35moe", gen("qwen35moe"), chat.Image{Width: 1920, Height: 1080}, 60*34 + 2},
		{"qwen35", gen("qwen35"), chat.Image{Width: 10, Height: 10}, 3*3 + 2},
		{"qwen35", gen("qwen35"), chat.Image{Width: 5000, Height: 10}, 156*1 + 2},
	} {
		m := serverVision(t, ollama034, c.arch, c.keys)
		if n, exact := imageShare(t, m, c.img); n != c.want || !exact {
			t.Errorf("%s %v: %d, exact %v; want %d, exact", c.arch, c.img, n, exact, c.want)
		}
	}
	// An image of unknown size: an estimate. No patch size: clip refuses
	// the tower, ctxproxy estimates at 768. qwen3next's tower is not
	// translated for clip: an estimate.
	if _, exact := imageShare(t, serverVision(t, ollama034, "qwen25vl", real("qwen25vl")), chat.Image{}); exact {
		t.Error("qwen25vl, unknown size: exact")
	}
	for _, arch := range []string{"qwen25vl", "qwen3next"} {
		keys := gen(arch)
		if arch == "qwen25vl" {
			keys = map[string]any{}
		}
		if n, exact := imageShare(t, serverVision(t, ollama034, arch, keys), chat.Image{Width: 64, Height: 64}); exact || n != imageTokens {
			t.Errorf("%s %v: %d, exact %v; want %d, an estimate", arch, keys, n, exact, imageTokens)
		}
	}
}

// TestMistral3ServerImages: on llama-server a Mistral 3 image is clip's
// pixtral squares (patch_size × spatial_merge_size pixels, 8 to 1024 of
// them), a break between rows and [IMG_END]; worked out apart from the
// rule.
func TestMistral3ServerImages(t *testing.T) {
	keys := map[string]any{"mistral3.vision.patch_size": float64(14), "mistral3.spatial_merge_size": float64(2), "mistral3.vision.longest_edge": float64(224)}
	m := serverVision(t, ollama034, "mistral3", keys)
	for _, c := range []struct {
		w, h, cols, rows int
	}{
		{56, 56, 3, 3}, {120, 72, 4, 3}, {20, 20, 3, 3}, {90, 500, 3, 18}, {1000, 100, 36, 4},
		{500, 560, 18, 20}, {1540, 1540, 32, 32}, {1000, 999, 32, 31}, {400, 10, 14, 1},
	} {
		want := c.cols*c.rows + c.rows - 1 + 1
		if n, exact := imageShare(t, m, chat.Image{Width: c.w, Height: c.h}); n != want || !exact {
			t.Errorf("%d×%d: %d, exact %v; want %d, exact", c.w, c.h, n, exact, want)
		}
	}
	if _, exact := imageShare(t, m, chat.Image{}); exact {
		t.Error("unknown size: exact")
	}
	if n, exact := imageShare(t, serverVision(t, ollama034, "mistral3", map[string]any{}), chat.Image{Width: 56, Height: 56}); exact || n != imageTokens {
		t.Errorf("no patch size: %d, exact %v; want %d, an estimate", n, exact, imageTokens)
	}
}

// TestLlama4ServerImages: on llama-server a Llama 4 image is one tile of
// (image_size/patch_size/merge)² tokens when it fits a tile, else the
// tiles of the best canvas of up to 3×3 and an overview, between
// <|image_start|> and <|image_end|>; the canvases worked out apart from
// the rule.
func TestLlama4ServerImages(t *testing.T) {
	for _, c := range []struct {
		keys    map[string]any
		w, h    int
		x, y    int
		perTile int
	}{
		{map[string]any{"llama4.vision.image_size": float64(336), "llama4.vision.patch_size": float64(14), "llama4.vision.pixel_shuffle_ratio": 0.5}, 336, 336, 0, 0, 144},
		{map[string]any{"llama4.vision.image_size": float64(336), "llama4.vision.patch_size": float64(14), "llama4.vision.pixel_shuffle_ratio": 0.5}, 1024, 768, 3, 3, 144},
		{map[string]any{"llama4.vision.image_size": float64(336), "llama4.vision.patch_size": float64(14)}, 500, 200, 2, 1, 144},
		{map[string]any{"llama4.vision.image_size": float64(336), "llama4.vision.patch_size": float64(14), "llama4.vision.pixel_shuffle_ratio": 0.25}, 2000, 300, 3, 1, 36},
		{map[string]any{"llama4.vision.image_size": float64(56), "llama4.vision.patch_size": float64(14)}, 57, 57, 2, 2, 4},
		{map[string]any{"llama4.vision.image_size": float64(56), "llama4.vision.patch_size": float64(14)}, 50, 400, 1, 3, 4},
		{map[string]any{"llama4.vision.image_size": float64(56), "llama4.vision.patch_size": float64(14)}, 168, 112, 3, 2, 4},
	} {
		m := serverVision(t, ollama034, "llama4", c.keys)
		want := (1+c.x*c.y)*c.perTile + 2
		if n, exact := imageShare(t, m, chat.Image{Width: c.w, Height: c.h}); n != want || !exact {
			t.Errorf("%v %d×%d: %d, exact %v; want %d, exact", c.keys, c.w, c.h, n, exact, want)
		}
	}
}

// TestGLMOCRServerImages: on llama-server a GLM-OCR image is clip's glm4v
// squares of patch_size × spatial_merge_size pixels, 8 to 4096 of them,
// min_pixels and max_pixels unread, between <|begin_of_image|> and
// <|end_of_image|>; worked out apart from the rule.
func TestGLMOCRServerImages(t *testing.T) {
	keys := map[string]any{"glmocr.vision.patch_size": float64(14), "glmocr.vision.spatial_merge_size": float64(2), "glmocr.vision.max_pixels": float64(100352)}
	m := serverVision(t, ollama034, "glmocr", keys)
	for _, c := range []struct{ w, h, cols, rows int }{
		{400, 300, 14, 11}, {10, 10, 3, 3}, {1000, 200, 36, 7}, {1920, 1080, 69, 39}, {3000, 3000, 64, 64},
	} {
		if n, exact := imageShare(t, m, chat.Image{Width: c.w, Height: c.h}); n != c.cols*c.rows+2 || !exact {
			t.Errorf("%d×%d: %d, exact %v; want %d, exact", c.w, c.h, n, exact, c.cols*c.rows+2)
		}
	}
}

// TestDeepSeekOCRServerImages: on llama-server a DeepSeek-OCR image is
// clip's 273-token global view, plus its grid's tiles when it is larger
// than a 640-pixel tile, and the "\n" mtmd writes after it; the grids
// worked out apart from the rule (clip compares a tie with the later
// grid's pixels: 906² and 1000×500 keep the earlier grid).
func TestDeepSeekOCRServerImages(t *testing.T) {
	m := serverVision(t, ollama034, "deepseekocr", nil)
	nl, _ := m.CountText("\n")
	for _, c := range []struct{ w, h, x, y int }{
		{1200, 800, 3, 2}, {800, 1200, 2, 3}, {10, 10, 0, 0}, {905, 905, 2, 2}, {906, 906, 2, 2},
		{600, 300, 0, 0}, {1000, 500, 2, 1}, {300, 1000, 1, 3}, {2000, 150, 9, 1}, {1920, 1080, 4, 2},
	} {
		want := 273 + nl
		if c.x > 0 {
			want += (10*c.x + 1) * 10 * c.y
		}
		if n, exact := imageShare(t, m, chat.Image{Width: c.w, Height: c.h}); n != want || !exact {
			t.Errorf("%d×%d: %d, exact %v; want %d, exact", c.w, c.h, n, exact, want)
		}
	}
}

// TestCountRendered: a prompt the server rendered, its images written as
// [img-N] tags by a renderer ctxproxy lacks, is counted as the runner
// encodes it: the text between tags apart, BOS with the first part, each
// image's cost where its tag is; the same as Count gives for the same
// text rendered by ctxproxy, and exact where Count of a server-rendered
// model is not.
func TestCountRendered(t *testing.T) {
	keys := map[string]any{"gemma3.vision.image_size": float64(56), "gemma3.vision.patch_size": float64(14)}
	local := serverVision(t, ollama034, "gemma3", keys)
	kv := vocabgen.BPE(2000, "qwen2", 1).WithSpecials(serverMarkers...).KV()
	kv["general.architecture"] = "gemma3"
	maps.Copy(kv, keys)
	rendered, err := New(Show{Version: ollama034, ModelInfo: kv, Renderer: "no-such-renderer", Capabilities: []string{"completion", "vision"}})
	if err != nil || !rendered.ServerRenders() {
		t.Fatalf("a renderer model on 0.34.3: %v", err)
	}
	p := Prompt{Messages: []api.Message{
		{Role: "user", Content: "look at these", Images: []api.ImageData{{1}, {2}}},
		{Role: "assistant", Content: "two cats"},
		{Role: "user", Content: "and [img] this one", Images: []api.ImageData{{3}}},
	}, Images: []chat.Image{{Width: 56, Height: 56}, {Width: 640, Height: 480}}}
	text, err := local.Render(p)
	if err != nil {
		t.Fatal(err)
	}
	want, wantExact, err := local.Count(p)
	if err != nil || !wantExact {
		t.Fatalf("Count = %d, %v, %v", want, wantExact, err)
	}
	if _, exact, _ := rendered.Count(p); exact {
		t.Error("a server-rendered model counted by ctxproxy's own rendering as exact")
	}
	got, exact, err := rendered.CountRendered(text, p.Sizes())
	if err != nil || got != want || !exact {
		t.Errorf("CountRendered(%q) = %d, %v, %v; want %d, exact", text, got, exact, err, want)
	}
	// The images' costs are where the tags are: without the images, the
	// tags are text.
	bare, _ := rendered.CountPrompt(text)
	if n, exact, err := rendered.CountRendered(text, nil); n != bare || !exact || err != nil {
		t.Errorf("no images: %d, %v, %v; want %d", n, exact, err, bare)
	}
	if got := len(p.Sizes()); got != 3 {
		t.Errorf("Sizes: %d; want one per image, 3", got)
	}
}
