//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget/exact"
	ctxchat "github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/testkit/ggufgen"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
)

// qwen25vlVisionVocab is a Qwen 2 byte-level BPE vocabulary that puts
// Qwen 2.5 VL's vision markers at the ids Ollama's Qwen 2.5 VL model code
// writes into a prompt by number (151652 <|vision_start|>, 151653
// <|vision_end|>, 151655 <|image_pad|>), as Qwen's own vocabulary has
// them.
func qwen25vlVisionVocab(t *testing.T) vocabgen.Vocab {
	v := vocabgen.BPE(151652, "qwen2", 71).
		WithSpecials("<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>")
	if len(v.Tokens) != 151656 || v.Tokens[151652] != "<|vision_start|>" || v.Tokens[151655] != "<|image_pad|>" {
		t.Fatalf("the vision markers are not at 151652–151655 (%d tokens)", len(v.Tokens))
	}
	return v
}

// qwen25vlSizes are the images of TestRealOllama_Qwen25VLVision, sized
// to hit each branch of SmartResize with the generated tower's 16-pixel
// squares (8-pixel patches merged 2×2) and its 100,000-pixel limit, and
// what each costs by Ollama v0.17.4's processor worked out by hand:
// squares high × squares wide, plus vision start and end. On llama-server
// clip keeps an image between 1024 squares (Ollama's --image-min-tokens)
// and 4096 and ignores max_pixels: every size is scaled up, to the
// squares wide × high given.
var qwen25vlSizes = []sizedImage{
	{"3.5 squares a side", 56, 56, 4*4 + 2, 32*32 + 2},
	{"under 56×56: scaled up", 20, 20, 4*4 + 2, 32*32 + 2},
	{"halves round to even", 120, 72, 4*8 + 2, 42*25 + 2},
	{"over max_pixels: scaled down", 600, 400, 16*24 + 2, 40*27 + 2},
	{"square over max_pixels", 400, 400, 19*19 + 2, 32*32 + 2},
	{"wide, just under max_pixels", 2000, 50, 3*125 + 2, 203*6 + 2},
	{"odd sizes", 333, 77, 5*21 + 2, 67*16 + 2},
	{"tall and narrow", 17, 300, 19*1 + 2, 8*135 + 2},
}

// TestRealOllama_Qwen25VLVision: a generated Qwen 2.5 VL with a vision
// tower (shown with the vision capability) costs each image what
// ctxproxy's rule says for its size, on Ollama's engine: the Tokenizer
// made from /api/show as the proxy makes it counts every chat, sent
// straight to Ollama's /api/chat, at its prompt_eval_count, with images
// of every SmartResize branch, two in one message and two in two; the
// same chat without the image is shorter on the server by the rule's
// cost. Through ctxproxy, on /api/chat whole and streamed,
// /v1/chat/completions, /v1/responses and /v1/messages (each dialect's
// image shape), X-Ctxproxy-Tokens equals prompt_eval_count and every
// report is held against the count.
func TestRealOllama_Qwen25VLVision(t *testing.T) {
	o := need(t)
	const name = "gen-qwen25vl-vision"
	shape := ggufgen.Shape{Seed: 5, Arch: "qwen25vl", Vision: true, Embedding: 32}
	if err := createModelShape(o, name, qwen25vlVisionVocab(t), shape); err != nil {
		t.Fatalf("creating the model: %v", err)
	}
	tok := visionTokenizer(t, o.url, name)
	if !tok.Vision() {
		t.Fatal("the tokenizer does not see the vision capability")
	}

	var b strings.Builder
	fmt.Fprintf(&b, "%-30s %-10s %7s %7s %7s\n", "image", "size", "cost", "ctxprx", "ollama")
	direct := func(label, size string, msgs []api.Message, sizes []ctxchat.Image) int {
		t.Helper()
		want, whole, err := tok.Count(exact.Prompt{Messages: msgs, Images: sizes})
		if err != nil || !whole {
			t.Errorf("%s: Count %d, exact %v, %v", label, want, whole, err)
		}
		res := chat(t, o.url, chatRequest{Model: name, Messages: msgs})
		eval := res.final.PromptEvalCount
		fmt.Fprintf(&b, "%-30s %-10s %7s %7d %7d\n", label, size, "", want, eval)
		if want != eval {
			t.Errorf("%s (%s): ctxproxy counts %d, prompt_eval_count %d", label, size, want, eval)
		}
		return eval
	}
	bare := conversation(1300, 3)
	bareEval := direct("no image", "", bare, nil)
	// CI: rounded up, scaled down, odd sizes.
	for _, s := range visionCases(qwen25vlSizes, 0, 3, 6) {
		msgs := slices.Clone(bare)
		msgs[len(msgs)-1].Images = []api.ImageData{testPNG(s.w, s.h)}
		img := ctxchat.Image{Width: s.w, Height: s.h}
		size := fmt.Sprintf("%d×%d", s.w, s.h)
		eval := direct(s.name, size, msgs, []ctxchat.Image{img})
		// The image is really there: it adds its cost on the server
		// (the tag "[img-0]" splits the text where Qwen 2's
		// pre-tokenizer splits it anyway, after the newline).
		fmt.Fprintf(&b, "%-30s %-10s %7d %7s %7d\n", "  the image alone", size, s.want(), "", eval-bareEval)
		if eval-bareEval != s.want() {
			t.Errorf("%s (%s): the image added %d tokens on the server, want %d", s.name, size, eval-bareEval, s.want())
		}
	}
	wide, odd := qwen25vlSizes[3], qwen25vlSizes[6]
	both := conversation(1301, 2)
	both[len(both)-1].Content = "Compare [img] with [img].\n" + hardText
	both[len(both)-1].Images = []api.ImageData{testPNG(wide.w, wide.h), testPNG(odd.w, odd.h)}
	direct("two in one message", "", both, []ctxchat.Image{{Width: wide.w, Height: wide.h}, {Width: odd.w, Height: odd.h}})
	two := conversation(1302, 3)
	two[0].Images = []api.ImageData{testPNG(odd.w, odd.h)}
	two[len(two)-1].Images = []api.ImageData{testPNG(wide.w, wide.h)}
	direct("two in two messages", "", two, []ctxchat.Image{{Width: odd.w, Height: odd.h}, {Width: wide.w, Height: wide.h}})
	t.Log("straight to Ollama:\n" + b.String())

	qwen25vlThroughProxy(t, o, name)
}

// qwen25vlThroughProxy sends chats with images of each size through
// ctxproxy on each of visionRoutes:
// X-Ctxproxy-Tokens must equal prompt_eval_count on every one, and
// ctxproxy must hold every report against its count (none skipped as an
// estimate, no misses).
func qwen25vlThroughProxy(t *testing.T, o *ollamaServer, name string) {
	p := startCtxproxy(t, o.url, exactConfig)
	defer p.stop()
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %-22s %7s %7s\n", "size", "route", "sent", "ollama")
	requests := 0
	for i, s := range visionCases(qwen25vlSizes, 3) {
		msgs := conversation(1310+uint64(i), 2)
		msgs[len(msgs)-1].Images = []api.ImageData{testPNG(s.w, s.h)}
		size := fmt.Sprintf("%d×%d", s.w, s.h)
		for _, route := range visionRoutes {
			sent, eval, err := visionSent(p.url, route, name, msgs)
			if err != nil {
				t.Errorf("%s on %s: %v", size, route, err)
				continue
			}
			requests++
			fmt.Fprintf(&b, "%-10s %-22s %7d %7d\n", size, route, sent, eval)
			if sent != eval {
				t.Errorf("%s on %s: X-Ctxproxy-Tokens %d, prompt_eval_count %d", size, route, sent, eval)
			}
		}
	}
	t.Log("through ctxproxy:\n" + b.String())

	visionChecked(t, p, name, requests)
}
