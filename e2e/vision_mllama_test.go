//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"io"
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

// imageChat is one chat of a vision family's test: its messages, images
// attached as PNGs.
type imageChat struct {
	name string
	msgs []api.Message
}

// sizes returns the sizes of c's images in the order the messages hold
// them, read from the PNGs.
func (c imageChat) sizes(t *testing.T) []ctxchat.Image {
	t.Helper()
	var out []ctxchat.Image
	for _, m := range c.msgs {
		for _, img := range m.Images {
			cfg, _, err := image.DecodeConfig(bytes.NewReader(img))
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			out = append(out, ctxchat.Image{Width: cfg.Width, Height: cfg.Height})
		}
	}
	return out
}

// withImages returns a chat of seed's conversation (turns user turns)
// with an image of each size on its last message, or on each of its user
// messages from the last back when apart.
func withImages(name string, seed uint64, turns int, apart bool, sizes ...[2]int) imageChat {
	msgs := conversation(seed, turns)
	last := len(msgs) - 1
	for i, s := range sizes {
		at := last
		if apart {
			at = last - 2*i
		}
		msgs[at].Images = append(msgs[at].Images, testPNG(s[0], s[1]))
	}
	return imageChat{name, msgs}
}

// imagesRefusedOnLlamaServer reports whether the suite's model name is
// of a vision family Ollama 0.30 and later cannot run images for: mllama
// (llama.cpp has no such architecture) and LFM2-VL (Ollama's
// compatibility layer has no translation of its vision tower, and
// llama-server fails to load the file: "wrong number of tensors").
func imagesRefusedOnLlamaServer(name string) bool {
	return strings.Contains(name, "mllama") || strings.Contains(name, "lfm2")
}

// visionFamilyCheck creates nothing: it holds model name's image counts
// against the real Ollama at o, for a vision family whose rule ctxproxy
// knows. It checks the model shows the vision capability; that ctxproxy's
// Tokenizer, built from /api/show as the proxy builds it, counts each
// chat (sent whole to Ollama's /api/chat) as prompt_eval_count; that
// through ctxproxy X-Ctxproxy-Tokens equals prompt_eval_count on
// each of visionRoutes, every report
// held against the count; and that each chat's images are really there:
// without them the server counts cost(image) fewer tokens for each (cost
// is the test's own figure, worked out by hand from the model's code).
// It returns the table of what it measured.
func visionFamilyCheck(t *testing.T, o *ollamaServer, name string, chats []imageChat, cost func(ctxchat.Image) int) string {
	tok := visionTokenizer(t, o.url, name)

	var b strings.Builder
	fmt.Fprintf(&b, "%-14s %-31s %-14s %7s %7s\n", "chat", "route", "images", "counted", "ollama")
	direct := func(c imageChat) (counted, eval int, exactCount bool) {
		counted, exactCount, err := tok.Count(exact.Prompt{Messages: c.msgs, Images: c.sizes(t)})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		body, _ := json.Marshal(chatRequest{Model: name, Messages: c.msgs})
		resp, err := http.Post(o.url+"/api/chat", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r api.ChatResponse
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if llamaServer() && imagesRefusedOnLlamaServer(name) {
				t.Skipf("Ollama %s cannot run %s with images (HTTP %d: %s); ctxproxy estimates its images there",
					suite.version, name, resp.StatusCode, strings.TrimSpace(string(msg)))
			}
			t.Fatalf("%s: HTTP %d from Ollama: %s", c.name, resp.StatusCode, msg)
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatalf("%s: Ollama's answer: %v", c.name, err)
		}
		return counted, r.PromptEvalCount, exactCount
	}
	sizes := func(c imageChat) string {
		var out []string
		for _, s := range c.sizes(t) {
			out = append(out, fmt.Sprintf("%dx%d", s.Width, s.Height))
		}
		return strings.Join(out, ",")
	}
	for _, c := range chats {
		counted, eval, whole := direct(c)
		fmt.Fprintf(&b, "%-14s %-31s %-14s %7d %7d\n", c.name, "direct /api/chat", sizes(c), counted, eval)
		if counted != eval || !whole {
			t.Errorf("%s (%s): Tokenizer.Count %d (exact %v), prompt_eval_count %d", c.name, sizes(c), counted, whole, eval)
		}
		// The images are really there: without them the server counts
		// each one's cost fewer.
		bare := imageChat{c.name + " bare", slices.Clone(c.msgs)}
		for i := range bare.msgs {
			bare.msgs[i].Images = nil
		}
		var want int
		for _, img := range c.sizes(t) {
			want += cost(img)
		}
		bareCount, bareEval, _ := direct(bare)
		fmt.Fprintf(&b, "%-14s %-31s %-14s %7d %7d\n", c.name, "direct /api/chat, no image", "", bareCount, bareEval)
		if eval-bareEval != want {
			t.Errorf("%s: the images added %d tokens on the server, want %d", c.name, eval-bareEval, want)
		}
	}

	p := startCtxproxy(t, o.url, exactConfig)
	defer p.stop()
	requests := 0
	for _, c := range chats {
		for _, route := range visionRoutes {
			sent, eval, err := visionSent(p.url, route, name, c.msgs)
			if err != nil {
				t.Errorf("%s %s: %v", c.name, route, err)
				continue
			}
			requests++
			fmt.Fprintf(&b, "%-14s %-31s %-14s %7d %7d\n", c.name, "ctxproxy "+route, sizes(c), sent, eval)
			if sent != eval {
				t.Errorf("%s on %s: X-Ctxproxy-Tokens %d, prompt_eval_count %d", c.name, route, sent, eval)
			}
		}
	}
	visionChecked(t, p, name, requests)
	return b.String()
}

// TestRealOllama_MllamaVision: a generated Llama 3.2 Vision with a tiny
// tower (two 80-pixel tiles at most) charges each image one token, the
// <|image|> its model code puts where the image was, whatever the image's
// size (smaller than a tile, one tile, two, scaled down, long and thin),
// with one image and with images in two messages (the server takes at
// most one a message); directly and through ctxproxy, counted exactly.
func TestRealOllama_MllamaVision(t *testing.T) {
	o := need(t)
	const name = "gen-mllama-vision"
	v := vocabgen.BPE(128256, "llama-bpe", 71).WithSpecials("<|image|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
	if v.Tokens[128256] != "<|image|>" {
		t.Fatalf("<|image|> is not at 128256 (%d tokens)", len(v.Tokens))
	}
	shape := ggufgen.Shape{Seed: 5, Arch: "mllama", Vision: true, Embedding: 32}
	if err := createModelShape(o, name, v, shape); err != nil {
		t.Fatalf("creating the model: %v", err)
	}
	var all []imageChat
	for i, s := range [][2]int{{16, 16}, {80, 80}, {160, 80}, {80, 160}, {300, 200}, {1000, 30}, {161, 161}} {
		all = append(all, withImages(fmt.Sprintf("one %dx%d", s[0], s[1]), 1300+uint64(i), 3, false, s))
	}
	all = append(all, withImages("two apart", 1320, 3, true, [2]int{120, 72}, [2]int{56, 56}))
	// CI: smaller than a tile, two tiles, scaled down, two images.
	chats := visionCases(all, 0, 2, 4, 7)
	t.Log("\n" + visionFamilyCheck(t, o, name, chats, func(ctxchat.Image) int { return 1 }))

	// /api/generate takes one image.
	p := startCtxproxy(t, o.url, exactConfig)
	defer p.stop()
	body, _ := json.Marshal(api.GenerateRequest{Model: name, Prompt: "Describe it. " + hardText, Images: []api.ImageData{testPNG(200, 120)}, Stream: new(bool)})
	if sent, eval, err := generateCounted(p.url, body); err != nil || sent != eval {
		t.Errorf("/api/generate with an image: X-Ctxproxy-Tokens %d, prompt_eval_count %d, %v", sent, eval, err)
	}
}
