//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget/exact"
	ctxchat "github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/testkit/ggufgen"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
)

// qwen3vlSizes are the images of the Qwen 3 VL family's tests, sized to
// hit each branch of SmartResize (Ollama v0.17.4
// model/models/qwen3vl/imageprocessor.go) with the generated tower's
// 32-pixel squares (16-pixel patches merged 2×2) and its shortest_edge
// of 32,768 pixels (ggufgen.Qwen3VLShortestEdge), and what each costs,
// worked out by hand: squares wide × squares high, plus vision start and
// end. On llama-server, clip's: the same squares kept between 1024
// (Ollama's --image-min-tokens for Qwen 3 VL) and 4096, shortest_edge
// unread.
var qwen3vlSizes = []sizedImage{
	{"one square: scaled up", 32, 32, 6*6 + 2, 32*32 + 2},
	{"small: scaled up", 100, 60, 8*5 + 2, 42*25 + 2},
	{"rounded, then scaled up", 200, 150, 7*5 + 2, 37*28 + 2},
	{"a multiple of 32", 256, 256, 8*8 + 2, 32*32 + 2},
	{"halves round to even", 208, 176, 6*6 + 2, 35*30 + 2},
	{"odd sizes", 333, 77, 12*3 + 2, 67*16 + 2},
	{"tall and narrow", 40, 900, 2*27 + 2, 7*152 + 2},
	{"4:3", 640, 480, 20*15 + 2, 37*28 + 2},
	{"1.2 M pixels: kept", 1200, 1000, 38*31 + 2, 38*31 + 2},
	{"3 M pixels: scaled down", 2000, 1500, 52*39 + 2, 63*47 + 2},
}

// qwen35Sizes are qwen3vlSizes for Qwen 3.5 (qwen35): the same on
// Ollama's engine; on llama-server Ollama sets no --image-min-tokens for
// it, and clip keeps an image between its own 8 and 4096 squares.
func qwen35Sizes() []sizedImage {
	server := []int{3*3 + 2, 4*3 + 2, 6*5 + 2, 8*8 + 2, 7*6 + 2, 10*2 + 2, 1*28 + 2, 20*15 + 2, 38*31 + 2, 63*47 + 2}
	sizes := slices.Clone(qwen3vlSizes)
	for i := range sizes {
		sizes[i].server = server[i]
	}
	return sizes
}

// TestRealOllama_Qwen3VLVision: a generated Qwen 3 VL (qwen3vl) with a
// tiny vision tower, and the same model with the qwen3-vl-instruct
// renderer, costs each image what ctxproxy's rule says for its size:
// qwen3vlVisionChecks.
func TestRealOllama_Qwen3VLVision(t *testing.T) {
	o := need(t)
	qwen3vlVisionChecks(t, o, "gen-qwen3vl-vision", "qwen3-vl-instruct", qwen3vlSizes,
		qwen25vlVisionVocab(t), ggufgen.Shape{Seed: 7, Arch: "qwen3vl", Vision: true, Embedding: 32})
}

// TestRealOllama_Qwen35Vision: the same for a generated Qwen 3.5
// (qwen35, Qwen3-Next's model code with Qwen 3 VL's tower), whose image
// tokens' ids are keys pointing at its vocabulary's markers, and with
// the qwen3.5 renderer.
func TestRealOllama_Qwen35Vision(t *testing.T) {
	o := need(t)
	v := vocabgen.BPE(32000, "qwen35", 73).WithSpecials("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<think>", "</think>")
	qwen3vlVisionChecks(t, o, "gen-qwen35-vision", "qwen3.5", qwen35Sizes(), v,
		ggufgen.Shape{Seed: 7, Arch: "qwen35", Vision: true, Embedding: 32})
}

// qwen3vlImage is an image's size in pixels.
type qwen3vlImage struct {
	w, h int
}

// qwen3vlChat is one chat of qwen3vlVisionChecks: to model, with the
// sizes of its images in order.
type qwen3vlChat struct {
	model, label string
	msgs         []api.Message
	images       []qwen3vlImage
}

// qwen3vlVisionChecks creates name from v and shape (with the vision
// capability) and a copy of it with renderer, then checks on the real
// server:
//   - straight to Ollama's /api/chat, the Tokenizer made from /api/show as
//     ctxproxy's backend makes it counts each chat at its
//     prompt_eval_count: one image of each of sizes, two in one
//     message, two in two, the same with the renderer (on llama-server
//     an estimate with it: serverRendered, for the server renders it);
//   - each image adds its rule's cost on the server over the chat
//     without it;
//   - through ctxproxy, on /api/chat whole and streamed and
//     /v1/chat/completions, X-Ctxproxy-Tokens equals prompt_eval_count
//     and every report is held against the count;
//   - an image narrower than a square fails on the server (its runner
//     stops), and ctxproxy counts it as an estimate; llama-server scales
//     it up, and ctxproxy counts it exactly.
func qwen3vlVisionChecks(t *testing.T, o *ollamaServer, name, renderer string, sizes []sizedImage, v vocabgen.Vocab, shape ggufgen.Shape) {
	if err := createModelShape(o, name, v, shape); err != nil {
		t.Fatalf("creating the model: %v", err)
	}
	rendered := name + "-rendered"
	createRendered(t, o, rendered, renderer, renderer, name)

	type image = qwen3vlImage
	type check = qwen3vlChat
	with := func(msgs []api.Message, at int, imgs ...image) []api.Message {
		msgs = slices.Clone(msgs)
		for _, img := range imgs {
			msgs[at].Images = append(msgs[at].Images, testPNG(img.w, img.h))
		}
		return msgs
	}
	bare := conversation(1400, 3)
	last := len(bare) - 1
	checks := []check{{model: name, label: "no image", msgs: bare}}
	// CI: scaled up, odd sizes, scaled down.
	picked := visionCases(sizes, 1, 5, 9)
	for _, s := range picked {
		img := image{s.w, s.h}
		checks = append(checks, check{name, fmt.Sprintf("%s %d×%d", s.name, s.w, s.h), with(bare, last, img), []image{img}})
	}
	small, big := image{100, 60}, image{2000, 1500}
	if llamaServer() {
		// 1180 squares, not 2961: with the 1052 small costs there, two
		// in one chat fit the generated model's 4096-token window.
		big = image{1200, 1000}
	}
	pair := conversation(1401, 2)
	pair[len(pair)-1].Content = "Compare [img] with [img].\n" + hardText
	checks = append(checks,
		check{name, "two in one message", with(pair, len(pair)-1, small, big), []image{small, big}},
		check{name, "two in two messages", with(with(bare, 1, big), last, small), []image{big, small}},
		check{rendered, "rendered: no image", bare, nil},
		check{rendered, "rendered: 100×60", with(bare, last, small), []image{small}},
		check{rendered, "rendered: two in one message", with(pair, len(pair)-1, small, big), []image{small, big}},
	)

	toks := map[string]*exact.Tokenizer{}
	for _, m := range []string{name, rendered} {
		toks[m] = visionTokenizer(t, o.url, m)
		if !toks[m].Vision() {
			t.Fatalf("%s: the tokenizer does not see the vision capability", m)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-46s %7s %7s %7s\n", "chat", "cost", "ctxprx", "ollama")
	bareEval := 0
	for i, c := range checks {
		var sizes []ctxchat.Image
		for _, img := range c.images {
			sizes = append(sizes, ctxchat.Image{Width: img.w, Height: img.h})
		}
		count, whole, err := toks[c.model].Count(exact.Prompt{Messages: c.msgs, Images: sizes})
		estimate := serverRendered(c.model, rendered)
		if err != nil || whole == estimate {
			t.Errorf("%s: Count %d, exact %v, %v", c.label, count, whole, err)
		}
		eval := chat(t, o.url, chatRequest{Model: c.model, Messages: c.msgs}).final.PromptEvalCount
		fmt.Fprintf(&b, "%-46s %7s %7d %7d\n", c.label, "", count, eval)
		if count != eval && !estimate {
			t.Errorf("%s: ctxproxy counts %d, prompt_eval_count %d", c.label, count, eval)
		}
		switch {
		case i == 0:
			bareEval = eval
		case i <= len(picked):
			// The image is really there: it adds its cost on the server
			// (the tag "[img-0]" splits the text where the pre-tokenizer
			// splits it anyway, after the newline).
			s := picked[i-1]
			fmt.Fprintf(&b, "%-46s %7d %7s %7d\n", "  the image alone", s.want(), "", eval-bareEval)
			if eval-bareEval != s.want() {
				t.Errorf("%s: the image added %d tokens on the server, want %d", c.label, eval-bareEval, s.want())
			}
		}
	}
	t.Log("straight to Ollama:\n" + b.String())

	qwen3vlThroughProxy(t, o, checks[1:])

	// Narrower than a square: Ollama's processor panics (SmartResize),
	// the runner stops and the request fails; ctxproxy's count is an
	// estimate. llama-server scales it up like any small image: counted
	// exactly.
	tiny := with(bare, last, image{20, 20})
	if llamaServer() {
		count, whole, err := toks[name].Count(exact.Prompt{Messages: tiny, Images: []ctxchat.Image{{Width: 20, Height: 20}}})
		eval := chat(t, o.url, chatRequest{Model: name, Messages: tiny}).final.PromptEvalCount
		if err != nil || !whole || count != eval {
			t.Errorf("a 20×20 image: ctxproxy counts %d (exact %v, %v), prompt_eval_count %d", count, whole, err, eval)
		}
		return
	}
	if _, whole, _ := toks[name].Count(exact.Prompt{Messages: tiny, Images: []ctxchat.Image{{Width: 20, Height: 20}}}); whole {
		t.Error("a 20×20 image: counted as exact")
	}
	mark := o.logMark(t)
	if res := chatRaw(t, o.url, chatRequest{Model: name, Messages: tiny}); res.status == http.StatusOK {
		t.Errorf("a 20×20 image: HTTP %d, prompt_eval_count %d; want the server to fail it", res.status, res.final.PromptEvalCount)
	} else {
		t.Logf("a 20×20 image: HTTP %d %.200s", res.status, res.body)
	}
	if !slices.ContainsFunc(o.logSince(t, mark), func(l string) bool { return strings.Contains(l, "must be larger than factor") }) {
		t.Error("a 20×20 image: no SmartResize panic in Ollama's log")
	}
}

// serverRendered reports whether a Tokenizer's own count of model is an
// estimate on the suite's server: on llama-server (0.30 and later) the
// server renders the prompts of a model with a renderer (rendered), and
// ctxproxy counts what it rendered (through ctxproxy: exact).
func serverRendered(model, rendered string) bool {
	return llamaServer() && model == rendered
}

// qwen3vlThroughProxy sends the chats of checks to their models through
// ctxproxy, each on one of visionRoutes in turn (the images' sizes reach
// the counter from
// each dialect's decoder), and wants X-Ctxproxy-Tokens to equal
// prompt_eval_count on every one, and every report held against the
// count (none skipped as an estimate, no misses): on llama-server the
// rendered model's too, whose prompts, image tags included, the server
// renders for ctxproxy.
func qwen3vlThroughProxy(t *testing.T, o *ollamaServer, checks []qwen3vlChat) {
	p := startCtxproxy(t, o.url, exactConfig)
	defer p.stop()
	var b strings.Builder
	fmt.Fprintf(&b, "%-46s %-22s %7s %7s\n", "chat", "route", "sent", "ollama")
	sent := map[string]int{}
	for i, c := range checks {
		route := visionRoutes[i%len(visionRoutes)]
		got, eval, err := visionSent(p.url, route, c.model, c.msgs)
		if err != nil {
			t.Errorf("%s on %s: %v", c.label, route, err)
			continue
		}
		fmt.Fprintf(&b, "%-46s %-22s %7d %7d\n", c.label, route, got, eval)
		sent[c.model]++
		if got != eval {
			t.Errorf("%s on %s: X-Ctxproxy-Tokens %d, prompt_eval_count %d", c.label, route, got, eval)
		}
	}
	t.Log("through ctxproxy:\n" + b.String())

	for m, n := range sent {
		visionChecked(t, p, m, n)
	}
}
