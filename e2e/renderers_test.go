//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
)

// renderers are the built-in renderers of Ollama v0.17.4 and those
// later servers add, each with the parser its models ship with, on a
// generated model of the family that ships it (a row of families: its
// architecture where testkit/ggufgen writes one the server loads, else
// llama) with the control tokens the renderer writes added to its
// vocabulary, so that they count as the one token each they are. bos is
// the BOS token the renderer writes first, made the vocabulary's own and
// added by its tokenizer, as the family's files have it: the server then
// takes the written one off (its LeadingBOS). since is the Ollama
// version a row runs from ("" for v0.17.4's): 0.30, whose server renders
// for ctxproxy the renderers ctxproxy lacks, or the first version read
// that has the renderer (Ollama 0.32.0's source has ornith and cohere,
// 0.30.0's neither; 0.34.3's has the four newest, 0.32.0's none).
var renderers = []struct {
	renderer, parser, base string
	specials               []string
	bos, since             string
}{
	{renderer: "qwen3-coder", parser: "qwen3-coder", base: "fam-arch-qwen3moe", specials: qwenTools},
	{renderer: "qwen3-vl-instruct", parser: "qwen3-vl-instruct", base: "fam-arch-qwen3vl", specials: qwenTools},
	{renderer: "qwen3-vl-thinking", parser: "qwen3-vl-thinking", base: "fam-arch-qwen3vlmoe", specials: qwenTools},
	{renderer: "qwen3.5", parser: "qwen3.5", base: "fam-arch-qwen35", specials: qwenTools},
	{renderer: "cogito", parser: "cogito", base: "fam-llama3", specials: []string{"<|begin_of_text|>", "<think>", "</think>"}},
	{renderer: "deepseek3.1", parser: "deepseek3", base: "fam-arch-deepseek2", specials: []string{"<｜begin▁of▁sentence｜>",
		"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>",
		"<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>", "<think>", "</think>"}},
	{renderer: "olmo3", parser: "olmo3", base: "fam-arch-olmo3", specials: []string{"<|im_start|>", "<|im_end|>", "<functions>", "</functions>"}},
	{renderer: "olmo3.1", parser: "olmo3", base: "fam-arch-olmo3", specials: []string{"<|im_start|>", "<|im_end|>", "<functions>", "</functions>"}},
	{renderer: "olmo3-think", parser: "olmo3-think", base: "fam-arch-olmo3", specials: []string{"<|im_start|>", "<|im_end|>", "<think>", "</think>"}},
	{renderer: "olmo3-32b-think", parser: "olmo3-think", base: "fam-arch-olmo3", specials: []string{"<|im_start|>", "<|im_end|>", "<think>", "</think>"}},
	{renderer: "nemotron-3-nano", parser: "nemotron-3-nano", base: "fam-arch-nemotron_h", specials: qwenTools},
	{renderer: "functiongemma", parser: "functiongemma", base: "fam-arch-gemma3", specials: []string{"<start_function_declaration>",
		"<end_function_declaration>", "<start_function_call>", "<end_function_call>", "<start_function_response>",
		"<end_function_response>", "<escape>"}},
	{renderer: "glm-4.7", parser: "glm-4.7", base: "fam-arch-glm4moelite", specials: glmTools},
	{renderer: "glm-ocr", parser: "glm-ocr", base: "fam-arch-glmocr", specials: glmTools},
	{renderer: "lfm2", parser: "lfm2", base: "fam-arch-lfm2", specials: []string{"<|im_start|>", "<|im_end|>", "<|tool_call_start|>",
		"<|tool_call_end|>", "<|tool_list_start|>", "<|tool_list_end|>", "<|tool_response_start|>", "<|tool_response_end|>"}},
	{renderer: "lfm2-thinking", parser: "lfm2-thinking", base: "fam-arch-lfm2", specials: []string{"<|im_start|>", "<|im_end|>",
		"<think>", "</think>", "<|tool_call_start|>", "<|tool_call_end|>"}},
	// Ollama 0.30 and later. Qwen 3.8 and Ornith ship as Qwen 3.5
	// architectures (qwen3.8 with Qwen 3.5's parser); Gemma 4, Laguna,
	// Cohere's Command and Glimmer as architectures ggufgen does not
	// write, so on llama, with a vocabulary of the tokenizer kind they
	// have (Gemma's SentencePiece, byte-level BPE for the others).
	{renderer: "qwen3.8", parser: "qwen3.5", base: "fam-arch-qwen35", specials: qwenTools, since: "0.34.3"},
	{renderer: "ornith", parser: "ornith", base: "fam-arch-qwen35moe", specials: qwenTools, since: "0.32.0"},
	{renderer: "nemotron-3.5-nano", parser: "nemotron-3.5-nano", base: "fam-arch-nemotron_h", specials: qwenTools, since: "0.34.3"},
	{renderer: "gemma4", parser: "gemma4", base: "fam-spm", specials: gemma4Tools, bos: "<bos>", since: "0.30.0"},
	{renderer: "gemma4-small", parser: "gemma4", base: "fam-spm", specials: gemma4Tools, bos: "<bos>", since: "0.30.0"},
	{renderer: "gemma4-large", parser: "gemma4", base: "fam-spm", specials: gemma4Tools, bos: "<bos>", since: "0.30.0"},
	{renderer: "laguna", parser: "laguna", base: "fam-llama3", specials: lagunaTools, bos: "〈|EOS|〉", since: "0.30.0"},
	{renderer: "poolside-v1", parser: "poolside-v1", base: "fam-llama3", specials: lagunaTools, bos: "〈|EOS|〉", since: "0.34.3"},
	{renderer: "cohere", parser: "cohere", base: "fam-gpt-2", bos: "<BOS_TOKEN>", since: "0.32.0", specials: []string{
		"<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|SYSTEM_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>",
		"<|START_THINKING|>", "<|END_THINKING|>", "<|START_TEXT|>", "<|END_TEXT|>", "<|START_ACTION|>", "<|END_ACTION|>",
		"<|START_TOOL_RESULT|>", "<|END_TOOL_RESULT|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>"}},
	{renderer: "glimmer", parser: "glimmer", base: "fam-llama3", bos: "<|begin_of_text|>", since: "0.34.3", specials: []string{
		"<|start|>", "<|message|>", "<|eom|>", "<|eot|>", "<|patch|>"}},
}

// The control tokens of the tool and thinking markup of the Qwen family,
// GLM, Gemma 4 and Laguna.
var (
	qwenTools = []string{"<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
		"<think>", "</think>"}
	glmTools = []string{"[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<think>", "</think>",
		"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"}
	gemma4Tools = []string{"<|turn>", "<turn|>", "<|think|>", "<|channel>", "<channel|>", "<|tool>", "<tool|>", "<|tool_call>",
		"<tool_call|>", "<|tool_response>", "<tool_response|>", `<|"|>`}
	lagunaTools = []string{"<system>", "</system>", "<user>", "</user>", "<assistant>", "</assistant>", "<think>", "</think>",
		"<available_tools>", "</available_tools>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
		"</arg_value>", "<tool_response>", "</tool_response>"}
)

// hardText is what tokenizers disagree on: digits, CJK, code fences,
// runs of whitespace, and the text of special tokens.
const hardText = "Totals: 1234567 and 3.14159, 2026-11-27.\n\n```go\nfunc main() {}\n```\n\n" +
	"東京の天気は晴れです。 北京 42 度\n\t\t  indented   spaces\n<|im_start|>user <think>not a tag</think> [gMASK]<sop>"

// rendererConversation is a tool conversation with the hard text and,
// for a thinking model, a reply that thought.
func rendererConversation(seed uint64) []api.Message {
	msgs := toolConversation(seed, 2, false)
	msgs[len(msgs)-2].Thinking = "Let me think about 12 cities first."
	msgs[len(msgs)-1].Content += "\n" + hardText
	return msgs
}

// createRendered creates name from the tiny model (or from[0]) with a
// renderer and parser: its template stays ChatML, which the server then
// does not use.
func createRendered(t *testing.T, o *ollamaServer, name, renderer, parser string, from ...string) {
	t.Helper()
	u, _ := url.Parse(o.url)
	client := api.NewClient(u, http.DefaultClient)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := modelTiny
	if len(from) > 0 {
		src = from[0]
	}
	err := client.Create(ctx, &api.CreateRequest{Model: name, From: src, Renderer: renderer, Parser: parser},
		func(api.ProgressResponse) error { return nil })
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
}

// TestRealOllama_Renderers: a model Ollama renders with a built-in
// renderer (named only in its Modelfile by v0.17.4; from 0.30 rendered
// by the server for ctxproxy), built on a 32,000-token generated model of
// its family, is counted exactly from its first request, on /api/chat
// (whole and streamed) and /v1/chat/completions with tools, thinking and
// hard text, and on /v1/responses and /v1/messages (carried to
// /api/chat) with the hard text.
func TestRealOllama_Renderers(t *testing.T) {
	o := need(t)
	p := startCtxproxy(t, o.url, exactConfig)
	defer p.stop()
	var b strings.Builder
	fmt.Fprintf(&b, "%-18s %-22s %7s %7s\n", "renderer", "route", "sent", "ollama")
	rows := 0
	for i, r := range renderers {
		if r.since != "" && !serverAtLeast(r.since) {
			continue
		}
		rows++
		name := "rend-" + strings.ReplaceAll(r.renderer, ".", "-")
		base := familyNamed(r.base)
		base.specials = append(slices.Clone(base.specials), r.specials...)
		base.bos = r.bos
		if err := createFamily(o, name+"-base", base, 600+uint64(i)); err != nil {
			t.Fatalf("%s: creating its base: %v", r.renderer, err)
		}
		createRendered(t, o, name, r.renderer, r.parser, name+"-base")
		msgs, tools := rendererConversation(900+uint64(i)), toolsJSON
		plain := conversation(900+uint64(i), 6)
		plain[len(plain)-1].Content += "\n" + hardText
		if r.parser == "olmo3-think" {
			// Its parser has no tool calls: a conversation without.
			msgs, tools = plain, nil
		}
		for _, route := range []string{"/api/chat", "/api/chat stream", "/v1/chat/completions", "/v1/responses", "/v1/messages"} {
			msgs, tools := msgs, tools
			if route == "/v1/responses" || route == "/v1/messages" {
				// Their requests are written here without tools.
				msgs, tools = plain, nil
			}
			sent, eval, err := countedAndEvaluated(p.url, route, name, msgs, tools)
			if err != nil {
				t.Errorf("%s %s: %v", r.renderer, route, err)
				continue
			}
			fmt.Fprintf(&b, "%-18s %-22s %7d %7d\n", r.renderer, route, sent, eval)
			if sent != eval {
				t.Errorf("%s %s: X-Ctxproxy-Tokens %d vs prompt_eval_count %d (%+.1f%%)", r.renderer, route, sent, eval, 100*relErr(sent, eval))
			}
		}
	}
	t.Logf("%d renderers on Ollama %s\n%s", rows, suite.version, b.String())
}

// countedAndEvaluated sends msgs to ctxproxy at base on route ("/api/chat",
// "/api/chat stream" or "/v1/chat/completions") and returns its count and
// Ollama's.
func countedAndEvaluated(base, route, model string, msgs []api.Message, tools json.RawMessage) (sent, eval int, err error) {
	var body []byte
	switch route {
	case "/v1/chat/completions":
		body = openaiBody(model, msgs, tools)
	case "/v1/responses", "/v1/messages":
		if tools != nil {
			return 0, 0, fmt.Errorf("%s: tools in Ollama's shape", route)
		}
		body = dialectBody(route, model, msgs)
	default:
		body, _ = json.Marshal(chatRequest{Model: model, Messages: msgs, Tools: tools, Stream: route != "/api/chat"})
	}
	return countedAndEvaluatedBody(base, route, body)
}

// countedAndEvaluatedBody posts body to route ("/api/chat stream" is
// /api/chat) and returns ctxproxy's count and the backend's.
func countedAndEvaluatedBody(base, route string, body []byte) (sent, eval int, err error) {
	path := strings.TrimSuffix(route, " stream")
	resp, err := http.Post(base+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, data)
	}
	if _, err := fmt.Sscan(resp.Header.Get("X-Ctxproxy-Tokens"), &sent); err != nil {
		return 0, 0, fmt.Errorf("X-Ctxproxy-Tokens %q", resp.Header.Get("X-Ctxproxy-Tokens"))
	}
	if path == "/api/chat" {
		lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
		var last api.ChatResponse
		if err := json.Unmarshal(lines[len(lines)-1], &last); err != nil {
			return 0, 0, err
		}
		return sent, last.PromptEvalCount, nil
	}
	var v struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			InputTokens  int `json:"input_tokens"` // the Responses and Messages APIs
		} `json:"usage"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return 0, 0, err
	}
	return sent, max(v.Usage.PromptTokens, v.Usage.InputTokens), nil
}

// dialectBody is msgs as a request to OpenAI's Responses API
// (/v1/responses: input items, system messages among them, images as
// input_image parts with data: URLs) or Anthropic's Messages API
// (/v1/messages: the system prompt apart, images as base64 sources).
func dialectBody(route, model string, msgs []api.Message) []byte {
	var system []string
	var items []map[string]any
	for _, m := range msgs {
		if m.Role == "system" && route == "/v1/messages" {
			system = append(system, m.Content)
			continue
		}
		var content any = m.Content
		if len(m.Images) > 0 {
			text, image := "input_text", func(b64 string) any {
				return map[string]any{"type": "input_image", "image_url": "data:image/png;base64," + b64}
			}
			if route == "/v1/messages" {
				text, image = "text", func(b64 string) any {
					return map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": b64}}
				}
			}
			parts := []any{map[string]any{"type": text, "text": m.Content}}
			for _, img := range m.Images {
				parts = append(parts, image(base64.StdEncoding.EncodeToString(img)))
			}
			content = parts
		}
		items = append(items, map[string]any{"role": m.Role, "content": content})
	}
	if route == "/v1/responses" {
		b, _ := json.Marshal(map[string]any{"model": model, "input": items})
		return b
	}
	b, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 64, "system": strings.Join(system, "\n"), "messages": items})
	return b
}

// pixel is an 8×8 red PNG.
var pixel = func() []byte {
	b, _ := base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAgAAAAIAgAAAABLUjvqAAAAEklEQVR4nGP4z8DAwMDAwMDAAAANhAEBWEEd8QAAAABJRU5ErkJggg==")
	return b
}()

// TestRealOllama_ImageOnTextModel: an image sent to a model without
// vision costs only its tag in the text, which ctxproxy counts exactly
// (on /api/chat, /v1/chat/completions and /api/generate); from Ollama
// 0.30, whose llama-server refuses it, the client gets that refusal as
// it would directly. The model's plain requests stay exact after it.
func TestRealOllama_ImageOnTextModel(t *testing.T) {
	o := need(t)
	p := startCtxproxy(t, o.url, exactConfig)
	defer p.stop()
	msgs := conversation(950, 3)
	msgs[len(msgs)-1].Images = []api.ImageData{pixel}
	for _, route := range []string{"/api/chat", "/v1/chat/completions"} {
		body := openaiImageBody(modelTiny, msgs)
		if route == "/api/chat" {
			body, _ = json.Marshal(chatRequest{Model: modelTiny, Messages: msgs})
		}
		if llamaServer() {
			_, _, direct := countedAndEvaluatedBody(o.url, route, body)
			_, _, through := countedAndEvaluatedBody(p.url, route, body)
			if direct == nil || through == nil || !strings.Contains(through.Error(), "HTTP 400") ||
				!strings.Contains(through.Error(), "does not support multimodal") {
				t.Errorf("%s with an image on Ollama %s: directly %v, through ctxproxy %v", route, suite.version, direct, through)
			}
			continue
		}
		sent, eval, err := countedAndEvaluatedBody(p.url, route, body)
		if err != nil {
			t.Fatalf("%s: %v", route, err)
		}
		if sent != eval {
			t.Errorf("%s with an image: X-Ctxproxy-Tokens %d, prompt_eval_count %d", route, sent, eval)
		}
	}
	body, _ := json.Marshal(api.GenerateRequest{Model: modelTiny, Prompt: "Describe it.", Images: []api.ImageData{pixel}, Stream: new(bool)})
	if sent, eval, err := generateCounted(p.url, body); llamaServer() {
		if err == nil {
			t.Errorf("/api/generate with an image on Ollama %s: answered, where llama-server refuses it", suite.version)
		}
	} else if err != nil || sent != eval {
		t.Errorf("/api/generate with an image: X-Ctxproxy-Tokens %d, prompt_eval_count %d, %v", sent, eval, err)
	}
	plain := conversation(951, 3)
	res := chat(t, p.url, chatRequest{Model: modelTiny, Messages: plain})
	if sent := headerInt(t, res.header, "X-Ctxproxy-Tokens"); sent != res.final.PromptEvalCount {
		t.Errorf("a plain request after the image: %d, Ollama %d", sent, res.final.PromptEvalCount)
	}
}

// openaiImageBody is an OpenAI chat body whose messages with images carry
// them as image_url parts.
func openaiImageBody(model string, msgs []api.Message) []byte {
	var out []map[string]any
	for _, m := range msgs {
		if len(m.Images) == 0 {
			out = append(out, map[string]any{"role": m.Role, "content": m.Content})
			continue
		}
		parts := []any{map[string]any{"type": "text", "text": m.Content}}
		for _, img := range m.Images {
			parts = append(parts, map[string]any{"type": "image_url",
				"image_url": map[string]any{"url": "data:image/png;base64," + base64.StdEncoding.EncodeToString(img)}})
		}
		out = append(out, map[string]any{"role": m.Role, "content": parts})
	}
	b, _ := json.Marshal(map[string]any{"model": model, "messages": out})
	return b
}

// TestRealOllama_Qwen3Engine: a qwen3-architecture model, which Ollama
// runs on its own engine (before 0.30; in llama-server after), with a
// 32,000-token vocabulary split as Qwen 2 (digits one by one), is counted
// exactly on every route, with its ChatML template and with the
// qwen3-coder renderer, tools and hard text included.
func TestRealOllama_Qwen3Engine(t *testing.T) {
	o := need(t)
	const base = "gen-qwen3"
	if err := createModel(o, base, vocabgen.BPE(32000, "qwen2", 51), "qwen3"); err != nil {
		t.Fatal(err)
	}
	createRendered(t, o, base+"-coder", "qwen3-coder", "qwen3-coder", base)
	p := startCtxproxy(t, o.url, exactConfig)
	defer p.stop()
	plain := conversation(990, 6)
	plain[len(plain)-1].Content += "\n" + hardText
	for _, c := range []struct {
		model string
		msgs  []api.Message
		tools json.RawMessage
	}{
		{base, plain, nil},
		{base + "-coder", rendererConversation(991), toolsJSON},
	} {
		for _, route := range []string{"/api/chat", "/api/chat stream", "/v1/chat/completions"} {
			sent, eval, err := countedAndEvaluated(p.url, route, c.model, c.msgs, c.tools)
			if err != nil {
				t.Fatalf("%s %s: %v", c.model, route, err)
			}
			if sent != eval {
				t.Errorf("%s %s: X-Ctxproxy-Tokens %d, prompt_eval_count %d", c.model, route, sent, eval)
			}
		}
	}
	want := `"tokenizer":"ollama:gpt2/qwen2"`
	if llamaServer() {
		want = `"tokenizer":"llama.cpp:gpt2/qwen2"`
	}
	if !logHas(p.logPath, want) {
		t.Errorf("the model was not counted as Ollama %s runs it (%s)", suite.version, want)
	}
}
