//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget/exact"
	ctxchat "github.com/ctxproxy/ctxproxy/chat"
	"github.com/ollama/ollama/api"
)

// ocrSize is a test image's width and height in pixels.
type ocrSize struct{ w, h int }

func (s ocrSize) String() string { return fmt.Sprintf("%d×%d", s.w, s.h) }

// ocrNumCtx is the window of the direct requests: ctxproxy's under
// exactConfig too, so that both load the model once.
const ocrNumCtx = 8192

// ocrCounted returns what tok counts for msgs with images of sizes (in
// the messages' order) and what the real Ollama evaluates for them on
// /api/chat, asked directly. An estimate fails t.
func ocrCounted(t *testing.T, o *ollamaServer, tok *exact.Tokenizer, name string, msgs []api.Message, sizes []ocrSize) (counted, eval int) {
	t.Helper()
	images := make([]ctxchat.Image, len(sizes))
	for i, s := range sizes {
		images[i] = ctxchat.Image{Width: s.w, Height: s.h}
	}
	counted, whole, err := tok.Count(exact.Prompt{Messages: msgs, Images: images})
	if err != nil || !whole {
		t.Fatalf("counting %v: exact %v, %v", sizes, whole, err)
	}
	res := chat(t, o.url, chatRequest{Model: name, Messages: msgs, Options: map[string]any{"num_ctx": ocrNumCtx}})
	return counted, res.final.PromptEvalCount
}

// ocrVisionCheck holds ctxproxy's counts of name's images against the
// real Ollama: for each size, one image in the last message of a
// conversation, counted by the Tokenizer ctxproxy builds and evaluated
// by Ollama directly, must agree, and the image must really be there
// (the conversation without it is shorter on the server by what the
// count charges the image); then two images in two messages; then, for
// the first sizes, through ctxproxy on /api/chat whole and streamed and
// /v1/chat/completions, X-Ctxproxy-Tokens against prompt_eval_count with
// every report held against the count.
func ocrVisionCheck(t *testing.T, o *ollamaServer, name string, seed uint64, sizes []ocrSize) {
	tok := visionTokenizer(t, o.url, name)
	msgs := conversation(seed, 2)
	last := len(msgs) - 1
	bareCount, bareEval := ocrCounted(t, o, tok, name, msgs, nil)
	if bareCount != bareEval {
		t.Errorf("without an image: counted %d, prompt_eval_count %d", bareCount, bareEval)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %-28s %7s %7s %7s\n", "image", "route", "image", "counted", "ollama")
	fmt.Fprintf(&b, "%-12s %-28s %7s %7d %7d\n", "none", "/api/chat direct", "", bareCount, bareEval)
	for _, s := range sizes {
		with := slices.Clone(msgs)
		with[last].Images = []api.ImageData{testPNG(s.w, s.h)}
		counted, eval := ocrCounted(t, o, tok, name, with, []ocrSize{s})
		fmt.Fprintf(&b, "%-12s %-28s %7d %7d %7d\n", s, "/api/chat direct", eval-bareEval, counted, eval)
		if counted != eval {
			t.Errorf("%s: counted %d, prompt_eval_count %d", s, counted, eval)
		}
		if counted-bareCount != eval-bareEval || eval == bareEval {
			t.Errorf("%s: the image costs %d on the server, %d counted", s, eval-bareEval, counted-bareCount)
		}
	}
	two := slices.Clone(msgs)
	two[0].Images = []api.ImageData{testPNG(sizes[1].w, sizes[1].h)}
	two[last].Images = []api.ImageData{testPNG(sizes[0].w, sizes[0].h)}
	counted, eval := ocrCounted(t, o, tok, name, two, []ocrSize{sizes[1], sizes[0]})
	fmt.Fprintf(&b, "%-12s %-28s %7d %7d %7d\n", "two", "/api/chat direct", eval-bareEval, counted, eval)
	if counted != eval {
		t.Errorf("two images: counted %d, prompt_eval_count %d", counted, eval)
	}
	ocrThroughProxy(t, o, name, &b, msgs, sizes[:min(3, len(sizes))])
	t.Log("\n" + b.String())
}

// ocrThroughProxy sends msgs with one image of each size, and with the
// first two at once, through ctxproxy on the chat routes (visionRoutes), and fails t where
// X-Ctxproxy-Tokens is not prompt_eval_count or a report was not held
// against the count.
func ocrThroughProxy(t *testing.T, o *ollamaServer, name string, b *strings.Builder, msgs []api.Message, sizes []ocrSize) {
	p := startCtxproxy(t, o.url, exactConfig)
	defer p.stop()
	last := len(msgs) - 1
	cases := map[string][]api.Message{}
	var order []string
	for _, s := range sizes {
		with := slices.Clone(msgs)
		with[last].Images = []api.ImageData{testPNG(s.w, s.h)}
		cases[s.String()] = with
		order = append(order, s.String())
	}
	both := slices.Clone(msgs)
	both[last].Images = []api.ImageData{testPNG(sizes[0].w, sizes[0].h), testPNG(sizes[1].w, sizes[1].h)}
	cases["two in one"] = both
	order = append(order, "two in one")
	requests := 0
	for _, c := range order {
		for _, route := range visionRoutes {
			sent, eval, err := visionSent(p.url, route, name, cases[c])
			if err != nil {
				t.Errorf("%s %s: %v", c, route, err)
				continue
			}
			requests++
			fmt.Fprintf(b, "%-12s %-28s %7s %7d %7d\n", c, route+" proxy", "", sent, eval)
			if sent != eval {
				t.Errorf("%s through ctxproxy on %s: X-Ctxproxy-Tokens %d, prompt_eval_count %d", c, route, sent, eval)
			}
		}
	}
	visionChecked(t, p, name, requests)
}
