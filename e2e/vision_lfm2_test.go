//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"testing"

	ctxchat "github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/testkit/ggufgen"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// lfm2ImageCosts are what images of these sizes cost the generated
// LFM2-VL (testkit/ggufgen: 8-pixel patches merged 2×2, 4 to 16 tokens
// whole, split past 8,192 pixels into 64-pixel tiles of 16 tokens, 2 to
// 4 of them, with a thumbnail), worked out by hand from Ollama v0.17.4's
// model/models/lfm2: <|image_start|> and <|image_end|> (2), the image
// whole, or each tile after its row and column marker and the thumbnail
// after <|img_thumbnail|>. None is resized to a single merged column
// (16 pixels wide here): Ollama v0.17.4's projector panics on such an
// image (model_vision.go permutes a tensor that has lost a dimension)
// and the server answers 500.
var lfm2ImageCosts = []struct {
	size [2]int
	cost int
}{
	{[2]int{8, 8}, 2 + 2*2},                    // scaled up to 32×32
	{[2]int{64, 64}, 2 + 4*4},                  // the most tokens whole
	{[2]int{64, 48}, 2 + 4*3},                  // whole
	{[2]int{100, 30}, 2 + 6*2},                 // rounded to 96×32
	{[2]int{90, 70}, 2 + 4*3},                  // scaled down to 64×48
	{[2]int{128, 96}, 2 + 4*(1+16) + 1 + 4*3},  // 2×2 tiles, thumbnail 64×48
	{[2]int{200, 60}, 2 + 3*(1+16) + 1 + 7*2},  // 3×1 tiles, thumbnail 112×32
	{[2]int{300, 300}, 2 + 4*(1+16) + 1 + 4*4}, // 2×2 tiles, thumbnail 64×64
	{[2]int{100, 400}, 2 + 4*(1+16) + 1 + 2*8}, // 1×4 tiles, thumbnail 32×128
}

// TestRealOllama_LFM2Vision: a generated LFM2-VL with a tiny tower,
// rendered by Ollama's lfm2 renderer (which writes each message's image
// tags itself), charges each image what its size makes it: whole
// (scaled up, rounded, scaled down) or split into tiles with markers and
// a thumbnail; with one image, two in one message and images in two
// messages; directly and through ctxproxy, counted exactly. An lfm2moe
// with the same tower counts alike.
func TestRealOllama_LFM2Vision(t *testing.T) {
	o := need(t)
	v := vocabgen.BPE(32000, "lfm2", 73).WithSpecials(slices.Concat([]string{"<|startoftext|>", "<|im_start|>", "<|im_end|>"},
		ggufgen.LFM2VisionSpecials())...)
	var all []imageChat
	for i, c := range lfm2ImageCosts {
		all = append(all, withImages(fmt.Sprintf("one %dx%d", c.size[0], c.size[1]), 1400+uint64(i), 3, false, c.size))
	}
	all = append(all,
		withImages("two in one", 1420, 2, false, [2]int{64, 48}, [2]int{128, 96}),
		withImages("two apart", 1421, 3, true, [2]int{200, 60}, [2]int{8, 8}))
	// CI: scaled up, scaled down, split 2×2 and 3×1, two in one message.
	chats := visionCases(all, 0, 4, 5, 6, 9)
	cost := func(img ctxchat.Image) int {
		for _, c := range lfm2ImageCosts {
			if c.size == [2]int{img.Width, img.Height} {
				return c.cost
			}
		}
		t.Fatalf("no cost for %dx%d", img.Width, img.Height)
		return 0
	}
	// lfm2moe is the same model code with experts: a split image and
	// two in one message.
	for _, arch := range []string{"lfm2", "lfm2moe"} {
		name := "gen-" + arch + "-vision"
		if err := createModelShape(o, name+"-base", v, ggufgen.Shape{Seed: 5, Arch: arch, Vision: true}); err != nil {
			t.Fatalf("creating the model: %v", err)
		}
		createRendered(t, o, name, "lfm2", "lfm2", name+"-base")
		if arch == "lfm2moe" {
			chats = []imageChat{all[5], all[9]}
		}
		t.Logf("%s:\n%s", arch, visionFamilyCheck(t, o, name, chats, cost))
	}
}
