//go:build e2e

package e2e

import (
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/ggufgen"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// TestRealOllama_DeepSeekOCRVision: a generated DeepSeek-OCR with a tiny
// SAM and CLIP (one block each; ggufgen's deepseekocr layout with
// Shape.Vision) around a vocabulary that reaches its image token
// (128815, <image>) counts its images exactly on Ollama's engine: grids
// of 2×2, 3×3, 2×1, 4×2, 3×2, 2×3, 1×3 and 9×1 crops, and the two sides
// of the rule that picks the later of two equally near grids for an
// image with more than half its pixels (905² and 906²).
func TestRealOllama_DeepSeekOCRVision(t *testing.T) {
	o := need(t)
	const name = "gen-deepseekocr-vision"
	v := vocabgen.BPE(ggufgen.DeepSeekOCRImageToken, "deepseek-v3", 72).WithSpecials("<image>", "<｜User｜>", "<｜Assistant｜>")
	if v.Tokens[ggufgen.DeepSeekOCRImageToken] != "<image>" {
		t.Fatalf("<image> is not at %d (%d tokens)", ggufgen.DeepSeekOCRImageToken, len(v.Tokens))
	}
	if err := createModelShape(o, name, v, ggufgen.Shape{Seed: 5, Arch: "deepseekocr", Vision: true, Embedding: 32}); err != nil {
		t.Fatalf("creating the model: %v", err)
	}
	// CI: two grids.
	ocrVisionCheck(t, o, name, 1400, visionCases([]ocrSize{
		{1200, 800}, // 3×2
		{800, 1200}, // 2×3: rows and columns are not interchangeable
		{10, 10},    // tiny: 2×2
		{905, 905},  // 2×2: under half of 3×3 crops' pixels
		{906, 906},  // 3×3: over half
		{600, 300},  // 2×1
		{1000, 500}, // 4×2
		{300, 1000}, // 1×3
		{2000, 150}, // 9×1
	}, 5, 0))
}
