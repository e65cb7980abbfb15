//go:build e2e

package e2e

import (
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/ggufgen"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// llama4Sizes are the images TestRealOllama_Llama4Vision sends and what
// each costs the generated model (56-pixel tiles of 4 embeddings, at most
// 14 tiles): one tile is its 4 <|patch|> tokens and 3 markers; n tiles
// are n·(4+1) plus a global tile's 4+3. On llama-server (last column) an
// image larger than a tile is fitted to a canvas of 1 to 3 tiles across
// and down (mtmd's llava-uhd slicing), each tile and an overview 4 tokens,
// between <|image_start|> and <|image_end|>; no separators.
var llama4Sizes = []mistral3Size{
	{56, 56, 7, 4 + 2},                 // exactly one tile
	{20, 20, 7, 4 + 2},                 // tiny: scaled up to one tile
	{112, 56, 2*5 + 7, (2+1)*4 + 2},    // 2×1 tiles
	{57, 57, 4*5 + 7, (4+1)*4 + 2},     // a pixel over: 2×2
	{168, 112, 6*5 + 7, (6+1)*4 + 2},   // 3×2
	{50, 400, 8*5 + 7, (3+1)*4 + 2},    // 1×8; 1×3 on llama-server
	{200, 150, 12*5 + 7, (9+1)*4 + 2},  // 4×3; 3×3
	{390, 100, 14*5 + 7, (3+1)*4 + 2},  // 7×2: the most tiles; 3×1
	{1000, 50, 14*5 + 7, (3+1)*4 + 2},  // wider than any canvas: 14×1, scaled down; 3×1
	{300, 300, 9*5 + 7, (9+1)*4 + 2},   // larger than any canvas: 3×3, scaled down
	{1024, 768, 12*5 + 7, (9+1)*4 + 2}, // 4×3, scaled down; 3×3
}

// llama4ImageTokens are the names of Llama 4's image tokens, from
// <|image_start|> (200080) to <|patch|> (200092), in order.
var llama4ImageTokens = []string{
	"<|image_start|>", "<|image_end|>", "<|vision_reserved_special_token_0|>", "<|vision_reserved_special_token_1|>",
	"<|tile_x_separator|>", "<|tile_y_separator|>", "<|vision_reserved_special_token_2|>", "<|vision_reserved_special_token_3|>",
	"<|vision_reserved_special_token_4|>", "<|vision_reserved_special_token_5|>", "<|image|>", "<|vision_reserved_special_token_6|>",
	"<|patch|>",
}

// TestRealOllama_Llama4Vision: a generated Llama 4 with a vision tower
// (ggufgen.Shape.Vision) shows the vision capability, and for images of
// many sizes (one tile, tiny, grids of tiles, the most tiles, larger than
// every canvas) the Tokenizer built from its /api/show counts exactly
// what Ollama's engine evaluates (prompt_eval_count of /api/chat, asked
// directly); each image adds the rule's cost to the same chat without
// it. Three images in one chat are exact too, and through ctxproxy on
// the chat routes (visionRoutes) and /api/generate
// X-Ctxproxy-Tokens equals prompt_eval_count on every request.
func TestRealOllama_Llama4Vision(t *testing.T) {
	o := need(t)
	const name = "gen-llama4-vision"
	v := vocabgen.BPE(200080, "llama4", 81).WithSpecials(llama4ImageTokens...)
	if v.Tokens[200080] != "<|image_start|>" || v.Tokens[200092] != "<|patch|>" {
		t.Fatalf("the image tokens are not at 200080–200092 (%d tokens)", len(v.Tokens))
	}
	if err := createModelShape(o, name, v, ggufgen.Shape{Seed: 5, Arch: "llama4", Vision: true, Embedding: 32}); err != nil {
		t.Fatalf("creating the model: %v", err)
	}
	tok := visionTokenizer(t, o.url, name)
	// CI: one tile, a pixel over (2×2), the most tiles, scaled down.
	sizes := visionCases(llama4Sizes, 0, 3, 7, 10)
	t.Log("\n" + mistral3CheckSizes(t, o.url, tok, name, sizes, 1400))
	t.Log("\n" + mistral3ThroughProxy(t, o.url, name, sizes, 1400))
}
