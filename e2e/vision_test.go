//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/ggufgen"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/types/model"
)

// gemmaVisionVocab is a SentencePiece vocabulary that puts Gemma 3's
// image markers at the ids Ollama's Gemma 3 model code writes into a
// prompt by number (255999 <start_of_image>, 256000 <end_of_image>).
func gemmaVisionVocab(t *testing.T) vocabgen.Vocab {
	v := vocabgen.SentencePiece(255999, 61).
		WithSpecials("<start_of_image>", "<end_of_image>", "<start_of_turn>", "<end_of_turn>")
	if v.Tokens[255999] != "<start_of_image>" || v.Tokens[256000] != "<end_of_image>" {
		t.Fatalf("the image markers are not at 255999 and 256000 (%d tokens)", len(v.Tokens))
	}
	return v
}

// testPNG is a w×h PNG with a colour gradient.
func testPNG(w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(255 * x / w), uint8(255 * y / h), uint8((x + y) % 256), 255})
		}
	}
	var b bytes.Buffer
	_ = png.Encode(&b, img)
	return b.Bytes()
}

// TestRealOllama_GemmaVision: a generated Gemma 3 with a vision tower
// (shown with the vision capability) counts images exactly on Ollama's
// engine (each costs mm_tokens_per_image plus the four tokens around
// them) and on llama-server (clip's pooled patches and two markers), the
// [img-N] tags nothing, on the chat routes (visionRoutes)
// and /api/generate, with one image and with two;
// and ctxproxy holds those counts against the backend's reports.
func TestRealOllama_GemmaVision(t *testing.T) {
	o := need(t)
	const name = "gen-gemma3-vision"
	shape := ggufgen.Shape{Seed: 5, Arch: "gemma3", Vision: true, Embedding: 32}
	if err := createModelShape(o, name, gemmaVisionVocab(t), shape); err != nil {
		t.Fatalf("creating the model: %v", err)
	}
	u, _ := url.Parse(o.url)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	show, err := api.NewClient(u, http.DefaultClient).Show(ctx, &api.ShowRequest{Model: name})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(show.Capabilities, model.CapabilityVision) {
		t.Fatalf("capabilities %v: no vision", show.Capabilities)
	}

	p := startCtxproxy(t, o.url, exactConfig)
	defer p.stop()
	square, wide := testPNG(56, 56), testPNG(120, 72)
	one := conversation(1200, 3)
	one[len(one)-1].Images = []api.ImageData{square}
	two := conversation(1201, 3)
	two[0].Images = []api.ImageData{wide}
	two[len(two)-1].Content = "Compare [img] with the first picture.\n" + hardText
	two[len(two)-1].Images = []api.ImageData{square}
	both := conversation(1202, 2)
	both[len(both)-1].Images = []api.ImageData{square, wide}

	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %-22s %7s %7s\n", "images", "route", "sent", "ollama")
	requests, oneEval := 0, 0
	for _, c := range []struct {
		name string
		msgs []api.Message
	}{{"one", one}, {"two", two}, {"two in one", both}} {
		for _, route := range visionRoutes {
			sent, eval, err := visionSent(p.url, route, name, c.msgs)
			if err != nil {
				t.Errorf("%s %s: %v", c.name, route, err)
				continue
			}
			requests++
			if c.name == "one" {
				oneEval = eval
			}
			fmt.Fprintf(&b, "%-12s %-22s %7d %7d\n", c.name, route, sent, eval)
			if sent != eval {
				t.Errorf("%s image(s) on %s: X-Ctxproxy-Tokens %d, prompt_eval_count %d", c.name, route, sent, eval)
			}
		}
	}
	for i, imgs := range [][]api.ImageData{{square}, {wide, square}} {
		body, _ := json.Marshal(api.GenerateRequest{Model: name, Prompt: "Describe it. [img] " + hardText, Images: imgs, Stream: new(bool)})
		sent, eval, err := generateCounted(p.url, body)
		if err != nil {
			t.Errorf("/api/generate: %v", err)
			continue
		}
		requests++
		fmt.Fprintf(&b, "%-12d %-22s %7d %7d\n", len(imgs), "/api/generate", sent, eval)
		if sent != eval {
			t.Errorf("/api/generate with %d image(s) (%d): X-Ctxproxy-Tokens %d, prompt_eval_count %d", len(imgs), i, sent, eval)
		}
	}
	// The image is really there: the same conversation without it is
	// gemmaImageTokens() shorter on the server.
	bare := slices.Clone(one)
	bare[len(bare)-1].Images = nil
	body, _ := json.Marshal(chatRequest{Model: name, Messages: bare})
	if sent, eval, err := countedAndEvaluatedBody(p.url, "/api/chat", body); err != nil {
		t.Errorf("without the image: %v", err)
	} else {
		requests++
		fmt.Fprintf(&b, "%-12s %-22s %7d %7d\n", "none", "/api/chat", sent, eval)
		if sent != eval {
			t.Errorf("without the image: X-Ctxproxy-Tokens %d, prompt_eval_count %d", sent, eval)
		}
		if d := oneEval - eval; d != gemmaImageTokens() {
			t.Errorf("the image added %d tokens on the server, want %d", d, gemmaImageTokens())
		}
	}
	t.Log(b.String())

	visionChecked(t, p, name, requests)
}

// gemmaImageTokens is what one image adds to the generated Gemma 3's
// prompt on the server: on Ollama's engine its mm_tokens_per_image and
// four markers ("\n\n", <start_of_image>, <end_of_image>, "\n\n"); on
// llama-server (0.30 and later) clip's 4×4 patches pooled 4×4 into one
// embedding, between <start_of_image> and <end_of_image>, and one token
// more: the text after the image is tokenized on its own, and llama.cpp's
// SentencePiece tokenizer gives it a space prefix.
func gemmaImageTokens() int {
	if llamaServer() {
		return 1 + 2 + 1
	}
	return ggufgen.Gemma3VisionTokens + 4
}

// generateCounted posts a whole /api/generate body to ctxproxy at base
// and returns its count and the backend's.
func generateCounted(base string, body []byte) (sent, eval int, err error) {
	resp, err := http.Post(base+"/api/generate", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var g api.GenerateResponse
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&g); err != nil {
		return 0, 0, err
	}
	if _, err := fmt.Sscan(resp.Header.Get("X-Ctxproxy-Tokens"), &sent); err != nil {
		return 0, 0, fmt.Errorf("X-Ctxproxy-Tokens %q", resp.Header.Get("X-Ctxproxy-Tokens"))
	}
	return sent, g.PromptEvalCount, nil
}
