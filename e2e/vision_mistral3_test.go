//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/budget/exact"
	cpchat "github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/testkit/ggufgen"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
)

// mistral3Size is an image a real-server check sends and what it
// costs the generated model: on Ollama's engine (cost) and on
// llama-server, 0.30 and later (server).
type mistral3Size struct{ w, h, cost, server int }

// want is what the image costs on the suite's server.
func (s mistral3Size) want() int {
	if llamaServer() {
		return s.server
	}
	return s.cost
}

// mistral3Sizes are the images TestRealOllama_Mistral3Vision sends and
// what each costs the generated model (longest edge 224, 14-pixel
// patches merged 2×2): rows of merged patches × (columns + 1). On
// llama-server clip's pixtral resize keeps 8 to 1024 squares of 28
// pixels whatever the longest edge: rows × (columns + 1) of the squares
// given, a break between rows and [IMG_END] after the last.
var mistral3Sizes = []mistral3Size{
	{56, 56, 2 * 3, 3 * 4},       // 4×4 patches
	{120, 72, 3 * 5, 3 * 5},      // 9×6 patches: the odd column dropped
	{20, 20, 1 * 2, 3 * 4},       // tiny: padded up to 2×2 patches
	{42, 70, 2 * 2, 4 * 4},       // 3×5 patches
	{224, 224, 8 * 9, 8 * 9},     // exactly the longest edge
	{90, 500, 8 * 2, 18 * 4},     // scaled down to 40×224
	{1000, 100, 1 * 9, 4 * 37},   // scaled down to 224×22
	{28, 200, 7 * 2, 8 * 3},      // 2×15 patches
	{29, 29, 1 * 2, 3 * 4},       // 3×3 patches
	{500, 560, 8 * 8, 20 * 19},   // scaled down to 200×224
	{223, 225, 8 * 9, 8 * 9},     // scaled down to 222×224
	{57, 43, 2 * 3, 3 * 5},       // 5×4 patches
	{1540, 1540, 8 * 9, 32 * 33}, // Ollama's default longest edge, scaled to 224
	{300, 100, 3 * 9, 4 * 12},    // scaled down to 224×74
	{1000, 999, 8 * 9, 31 * 33},  // scaled down to 224×223
}

// mistral3Crashes are images Ollama v0.17.4's Mistral 3 cannot run: with
// fewer than a merge's patches on a side the projector has no merged
// patch, and the runner stops (an index out of range in the text model's
// forward pass, or a negative count in PostTokenize). The server answers
// an error; there is no count to match, and the rule says its cost is
// not exact. llama-server scales them up to 3×3 squares, 14×1 and 1×9,
// and counts them like any other.
var mistral3Crashes = [][2]int{{14, 14}, {400, 10}, {10, 100}}

// TestRealOllama_Mistral3Vision: a generated Mistral 3 with a Pixtral
// vision tower (ggufgen.Shape.Vision) shows the vision capability, and
// for images of many sizes (tiny, whole patches, odd patches, larger
// than its longest edge) the Tokenizer built from its /api/show counts
// exactly what Ollama's engine evaluates (prompt_eval_count of /api/chat,
// asked directly); each image adds the rule's cost to the same chat
// without it. Two images in one message and one in an earlier message
// are exact too, and through ctxproxy on /api/chat (whole and streamed),
// /v1/chat/completions, /v1/responses, /v1/messages and /api/generate
// X-Ctxproxy-Tokens equals prompt_eval_count on every request. Images too
// small for a merged patch make the server fail (mistral3Crashes).
func TestRealOllama_Mistral3Vision(t *testing.T) {
	o := need(t)
	const name = "gen-mistral3-vision"
	// [IMG_BREAK] and [IMG_END] are control tokens as in Mistral's files:
	// mtmd writes [IMG_END] after an image as text, parsing specials.
	v := vocabgen.BPE(32000, "tekken", 71).WithSpecials("[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[IMG_BREAK]", "[IMG_END]")
	if err := createModelShape(o, name, v, ggufgen.Shape{Seed: 5, Arch: "mistral3", Vision: true, Embedding: 32}); err != nil {
		t.Fatalf("creating the model: %v", err)
	}
	tok := visionTokenizer(t, o.url, name)

	// CI: patches, padded up, scaled down, odd patches.
	sizes := visionCases(mistral3Sizes, 0, 2, 5, 11)
	t.Log("\n" + mistral3CheckSizes(t, o.url, tok, name, sizes, 1300))
	t.Log("\n" + mistral3ThroughProxy(t, o.url, name, sizes, 1300))

	for _, c := range mistral3Crashes {
		msgs := conversation(1398, 1)
		msgs[len(msgs)-1].Images = []api.ImageData{testPNG(c[0], c[1])}
		if llamaServer() {
			mistral3Compare(t, o.url, tok, name, msgs, []cpchat.Image{{Width: c[0], Height: c[1]}})
			continue
		}
		body, _ := json.Marshal(chatRequest{Model: name, Messages: msgs})
		resp, err := http.Post(o.url+"/api/chat", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("%d×%d: HTTP %d %.200s", c[0], c[1], resp.StatusCode, data)
		if resp.StatusCode == http.StatusOK {
			t.Errorf("%d×%d: the server ran it; the rule calls it a failure", c[0], c[1])
		}
	}
}

// mistral3CheckSizes sends each of sizes alone in a chat (seeded from
// seed) to the real Ollama at base, directly, and the same chat without
// it; the count must equal prompt_eval_count on both and the image must
// add its cost on the server. Then the last three together: the first in
// an earlier message, two in the last, one placed by [img]. It returns
// the table of counts. TestRealOllama_Llama4Vision uses it too.
func mistral3CheckSizes(t *testing.T, base string, tok *exact.Tokenizer, name string, sizes []mistral3Size, seed uint64) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %7s %7s %7s %7s\n", "image", "counted", "ollama", "image", "rule")
	for i, c := range sizes {
		msgs := conversation(seed+uint64(i), 2)
		msgs[len(msgs)-1].Images = []api.ImageData{testPNG(c.w, c.h)}
		counted, eval := mistral3Compare(t, base, tok, name, msgs, []cpchat.Image{{Width: c.w, Height: c.h}})
		bare := slices.Clone(msgs)
		bare[len(bare)-1].Images = nil
		_, bareEval := mistral3Compare(t, base, tok, name, bare, nil)
		fmt.Fprintf(&b, "%4d×%-7d %7d %7d %7d %7d\n", c.w, c.h, counted, eval, eval-bareEval, c.want())
		if eval-bareEval != c.want() {
			t.Errorf("%d×%d: the image added %d tokens on the server, want %d", c.w, c.h, eval-bareEval, c.want())
		}
	}
	three := sizes[len(sizes)-3:]
	var imgs []cpchat.Image
	for _, c := range three {
		imgs = append(imgs, cpchat.Image{Width: c.w, Height: c.h})
	}
	msgs := conversation(seed+99, 3)
	msgs[1].Images = []api.ImageData{testPNG(three[0].w, three[0].h)}
	msgs[len(msgs)-1].Content = "Compare [img] with the first picture.\n" + hardText
	msgs[len(msgs)-1].Images = []api.ImageData{testPNG(three[1].w, three[1].h), testPNG(three[2].w, three[2].h)}
	counted, eval := mistral3Compare(t, base, tok, name, msgs, imgs)
	fmt.Fprintf(&b, "%-12s %7d %7d\n", "three", counted, eval)
	return b.String()
}

// mistral3ThroughProxy sends each of sizes alone in a chat (seeded from
// seed), then the last three together, through a ctxproxy in front of
// the real Ollama at base on /api/chat whole and streamed and
// /v1/chat/completions, and the last two as /api/generate's images:
// X-Ctxproxy-Tokens must equal prompt_eval_count on every request, and
// ctxproxy must have held every report against its count with no miss.
// It returns the table of counts. TestRealOllama_Llama4Vision uses it
// too.
func mistral3ThroughProxy(t *testing.T, base, name string, sizes []mistral3Size, seed uint64) string {
	t.Helper()
	p := startCtxproxy(t, base, exactConfig)
	defer p.stop()
	type chatCase struct {
		name string
		msgs []api.Message
	}
	var cases []chatCase
	for i, c := range sizes {
		msgs := conversation(seed+uint64(i), 2)
		msgs[len(msgs)-1].Images = []api.ImageData{testPNG(c.w, c.h)}
		cases = append(cases, chatCase{fmt.Sprintf("%d×%d", c.w, c.h), msgs})
	}
	three := sizes[len(sizes)-3:]
	msgs := conversation(seed+98, 3)
	msgs[1].Images = []api.ImageData{testPNG(three[0].w, three[0].h)}
	msgs[len(msgs)-1].Content = "Compare [img] with the first picture.\n" + hardText
	msgs[len(msgs)-1].Images = []api.ImageData{testPNG(three[1].w, three[1].h), testPNG(three[2].w, three[2].h)}
	cases = append(cases, chatCase{"three", msgs})

	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %-22s %7s %7s\n", "image", "route", "sent", "ollama")
	requests := 0
	for _, c := range cases {
		for _, route := range visionRoutes {
			sent, eval, err := visionSent(p.url, route, name, c.msgs)
			if err != nil {
				t.Errorf("%s %s: %v", c.name, route, err)
				continue
			}
			requests++
			fmt.Fprintf(&b, "%-12s %-22s %7d %7d\n", c.name, route, sent, eval)
			if sent != eval {
				t.Errorf("%s on %s: X-Ctxproxy-Tokens %d, prompt_eval_count %d", c.name, route, sent, eval)
			}
		}
	}
	body, _ := json.Marshal(api.GenerateRequest{Model: name, Prompt: "Describe it. [img] " + hardText,
		Images: []api.ImageData{testPNG(three[1].w, three[1].h), testPNG(three[2].w, three[2].h)}, Stream: new(bool)})
	if sent, eval, err := generateCounted(p.url, body); err != nil {
		t.Errorf("/api/generate: %v", err)
	} else {
		requests++
		fmt.Fprintf(&b, "%-12s %-22s %7d %7d\n", "two", "/api/generate", sent, eval)
		if sent != eval {
			t.Errorf("/api/generate with two images: X-Ctxproxy-Tokens %d, prompt_eval_count %d", sent, eval)
		}
	}
	visionChecked(t, p, name, requests)
	return b.String()
}

// mistral3Compare sends msgs to the real Ollama's /api/chat (whole),
// counts them with tok given the images' sizes, and fails the test
// unless the count is exact and equals prompt_eval_count.
func mistral3Compare(t *testing.T, base string, tok *exact.Tokenizer, name string, msgs []api.Message, imgs []cpchat.Image) (counted, eval int) {
	t.Helper()
	counted, whole, err := tok.Count(exact.Prompt{Messages: msgs, Images: imgs})
	if err != nil {
		t.Fatal(err)
	}
	if !whole {
		t.Errorf("%v: the count is an estimate", imgs)
	}
	body, _ := json.Marshal(chatRequest{Model: name, Messages: msgs})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/chat", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%v: %v", imgs, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var r api.ChatResponse
	if resp.StatusCode != http.StatusOK || json.Unmarshal(data, &r) != nil {
		t.Fatalf("%v: HTTP %d: %.300s", imgs, resp.StatusCode, data)
	}
	if counted != r.PromptEvalCount {
		t.Errorf("%v: counted %d, prompt_eval_count %d", imgs, counted, r.PromptEvalCount)
	}
	return counted, r.PromptEvalCount
}
