//go:build e2e

package e2e

import (
	"slices"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget/exact"
	ctxchat "github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/testkit/ggufgen"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
)

// TestRealOllama_GLMOCRVision: a generated GLM-OCR with a tiny vision
// tower (ggufgen's glmocr layout with Shape.Vision: images kept between
// 2·56² and 2·224² pixels) counts its images exactly on Ollama's engine,
// at sizes that take every branch of SmartResize: narrower than a merged
// patch, below min_pixels, the bounds exactly, above max_pixels, odd
// aspect ratios. Under Ollama's glm-ocr renderer, which writes no image
// tag, the server drops the image: it costs nothing, and ctxproxy counts
// nothing for it. On llama-server (0.30 and later) images cost clip's
// glm4v squares, and with the renderer the count is an estimate.
func TestRealOllama_GLMOCRVision(t *testing.T) {
	o := need(t)
	const name = "gen-glmocr-vision"
	v := vocabgen.BPE(32000, "glm4", 71).WithSpecials("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
		"<|begin_of_image|>", "<|end_of_image|>", "<|image|>")
	if err := createModelShape(o, name, v, ggufgen.Shape{Seed: 5, Arch: "glmocr", Vision: true}); err != nil {
		t.Fatalf("creating the model: %v", err)
	}
	// CI: scaled down, tiny, scaled up.
	ocrVisionCheck(t, o, name, 1300, visionCases([]ocrSize{
		{400, 300},  // above max_pixels: scaled down
		{10, 10},    // narrower than 28 pixels, then below min_pixels
		{1000, 200}, // above the max, 5:1
		{40, 30},    // below min_pixels: scaled up
		{56, 56},    // min_pixels exactly
		{224, 224},  // max_pixels exactly
		{100, 60},   // rounded half to even
		{300, 400},
		{20, 300}, // narrow: scaled up to a 28-pixel side
	}, 0, 1, 3))

	rendered := name + "-rendered"
	createRendered(t, o, rendered, "glm-ocr", "glm-ocr", name)
	tok := visionTokenizer(t, o.url, rendered)
	msgs := conversation(1301, 2)
	if llamaServer() {
		// The server renders (0.30 and later): the Tokenizer alone, with
		// ctxproxy's own glm-ocr renderer, says its count is an estimate;
		// through ctxproxy the server renders the prompt, its image tag
		// included, and the count is exact.
		with := slices.Clone(msgs)
		with[len(with)-1].Images = []api.ImageData{testPNG(400, 300)}
		if _, whole, err := tok.Count(exact.Prompt{Messages: with, Images: []ctxchat.Image{{Width: 400, Height: 300}}}); err != nil || whole {
			t.Errorf("glm-ocr renderer with an image on llama-server: exact %v, %v; want an estimate", whole, err)
		}
		p := startCtxproxy(t, o.url, exactConfig)
		defer p.stop()
		for _, route := range visionRoutes {
			got, eval, err := visionSent(p.url, route, rendered, with)
			t.Logf("glm-ocr renderer, a 400×300 image, %s: X-Ctxproxy-Tokens %d, prompt_eval_count %d", route, got, eval)
			if err != nil || got != eval {
				t.Errorf("glm-ocr renderer, a 400×300 image, %s: X-Ctxproxy-Tokens %d, prompt_eval_count %d, %v", route, got, eval, err)
			}
		}
		visionChecked(t, p, rendered, len(visionRoutes))
		return
	}
	bareCount, bareEval := ocrCounted(t, o, tok, rendered, msgs, nil)
	with := slices.Clone(msgs)
	with[len(with)-1].Images = []api.ImageData{testPNG(400, 300)}
	counted, eval := ocrCounted(t, o, tok, rendered, with, []ocrSize{{400, 300}})
	t.Logf("glm-ocr renderer: without the image counted %d, ollama %d; with it counted %d, ollama %d", bareCount, bareEval, counted, eval)
	if bareCount != bareEval || counted != eval || eval != bareEval {
		t.Errorf("glm-ocr renderer: without the image counted %d, ollama %d; with it counted %d, ollama %d (want all equal)",
			bareCount, bareEval, counted, eval)
	}
}
