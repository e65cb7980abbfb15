//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/testkit/ggufgen"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
)

// exactTolerance is the goal of exact counting: the first request's estimate within
// ±1% of prompt_eval_count, with no calibration.
const exactTolerance = 0.01

// chatMLTemplate is the template of the generated models: the "tiny"
// model's ChatML.
const chatMLTemplate = "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"

// Generated models: vocabularies of thousands of tokens, large enough
// that a tokenizer and a guess disagree by far more than 1%.
var generated = []struct {
	name  string
	vocab func() vocabgen.Vocab
}{
	{"gen-llama-bpe", func() vocabgen.Vocab { return vocabgen.BPE(8000, "llama-bpe", 21) }},
	{"gen-qwen2", func() vocabgen.Vocab { return vocabgen.BPE(8000, "qwen2", 22) }},
	{"gen-spm", func() vocabgen.Vocab { return vocabgen.SentencePiece(8000, 23) }},
	{"gen-refact", func() vocabgen.Vocab { return vocabgen.BPE(8000, "refact", 24) }},
	{"gen-tekken", func() vocabgen.Vocab { return vocabgen.BPE(8000, "tekken", 25) }},
	{"gen-default", func() vocabgen.Vocab { return vocabgen.BPE(8000, "default", 26) }},
}

var createOnce sync.Map // name → error

// ensureModel writes a generated model's GGUF and creates it in the real
// Ollama through its API (blob upload, then create), once per run.
func ensureModel(t *testing.T, o *ollamaServer, name string, v vocabgen.Vocab) {
	t.Helper()
	once, _ := createOnce.LoadOrStore(name, &sync.Once{})
	var err error
	once.(*sync.Once).Do(func() {
		err = createModel(o, name, v)
		if err != nil {
			createOnce.Store(name+":err", err)
		}
	})
	if e, ok := createOnce.Load(name + ":err"); ok {
		t.Fatalf("creating %s: %v", name, e)
	}
}

func createModel(o *ollamaServer, name string, v vocabgen.Vocab, arch ...string) error {
	shape := ggufgen.Shape{Seed: 5}
	if len(arch) > 0 {
		shape.Arch = arch[0]
	}
	return createModelShape(o, name, v, shape)
}

// createModelShape writes a generated model of shape with vocabulary v and
// creates it in the real Ollama as name, with the ChatML template.
func createModelShape(o *ollamaServer, name string, v vocabgen.Vocab, shape ggufgen.Shape) error {
	dir, err := os.MkdirTemp("", "ctxproxy-gguf-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, name+".gguf")
	if err := ggufgen.Write(path, v, shape); err != nil {
		return err
	}
	return createFromFile(o, name, path, &api.CreateRequest{Template: chatMLTemplate,
		Parameters: map[string]any{"num_predict": 16, "stop": []string{"<|im_end|>"}}})
}

// createFromFile creates the model name in the real Ollama from the GGUF
// file at path through its API (blob upload, then create), with req's
// template and parameters.
func createFromFile(o *ollamaServer, name, path string, req *api.CreateRequest) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	digest := fmt.Sprintf("sha256:%x", sha256.Sum256(data))
	u, _ := url.Parse(o.url)
	client := api.NewClient(u, http.DefaultClient)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := client.CreateBlob(ctx, digest, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	req.Model, req.Files = name, map[string]string{filepath.Base(path): digest}
	return client.Create(ctx, req, func(api.ProgressResponse) error { return nil })
}

// exactConfig: no calibration at all, a window that holds the test
// conversations whole.
const exactConfig = `
backend: {kind: ollama}
context: {auto_size: false, target_size: 8192, reserve_output: 256}
tokens: {calibrate: false}
`

// openaiBody turns an Ollama conversation into an OpenAI chat body, tool
// calls and results linked by ids.
func openaiBody(model string, msgs []api.Message, tools json.RawMessage) []byte {
	var out []map[string]any
	var pending []string
	n := 0
	for _, m := range msgs {
		om := map[string]any{"role": m.Role, "content": m.Content}
		if len(m.ToolCalls) > 0 {
			var calls []any
			pending = pending[:0]
			for _, tc := range m.ToolCalls {
				n++
				id := fmt.Sprintf("call_%d", n)
				pending = append(pending, id)
				args, _ := json.Marshal(tc.Function.Arguments)
				calls = append(calls, map[string]any{"id": id, "type": "function",
					"function": map[string]any{"name": tc.Function.Name, "arguments": string(args)}})
			}
			om["tool_calls"] = calls
		}
		if m.Role == "tool" && len(pending) > 0 {
			om["tool_call_id"] = pending[0]
			pending = pending[1:]
		}
		out = append(out, om)
	}
	body := map[string]any{"model": model, "messages": out, "stream": false}
	if tools != nil {
		body["tools"] = tools
	}
	b, _ := json.Marshal(body)
	return b
}

// exactRow is one first request's count against Ollama's.
type exactRow struct {
	model, route     string
	sent, evalCount  int
	guess, bytesFour int
}

// TestRealOllama_ExactFirstRequest checks exact counting: on the first
// request of a fresh ctxproxy, with calibration off, X-Ctxproxy-Tokens is
// within ±1% of Ollama's prompt_eval_count on /api/chat and
// /v1/chat/completions, for the realollama models and for generated
// models of 8,000 tokens with non-default pre-tokenizers; and both a
// tiktoken estimate and a bytes/4 count miss by more, so the test tells a
// real tokenizer from a guess.
func TestRealOllama_ExactFirstRequest(t *testing.T) {
	o := need(t)
	type tc struct {
		model string
		msgs  []api.Message
		tools json.RawMessage
	}
	cases := []tc{
		{modelTiny, conversation(700, 12), nil},
		{modelTools, toolConversation(701, 4, false), toolsJSON},
	}
	for i, g := range generated {
		ensureModel(t, o, g.name, g.vocab())
		cases = append(cases, tc{g.name, conversation(710+uint64(i), 14), nil})
	}
	var rows []exactRow
	for _, c := range cases {
		for _, route := range []string{"/api/chat", "/v1/chat/completions"} {
			p := startCtxproxy(t, o.url, exactConfig) // fresh: nothing learned
			var sent, eval int
			if route == "/api/chat" {
				res := chat(t, p.url, chatRequest{Model: c.model, Messages: c.msgs, Tools: c.tools})
				sent, eval = headerInt(t, res.header, "X-Ctxproxy-Tokens"), res.final.PromptEvalCount
			} else {
				resp, err := http.Post(p.url+route, "application/json", bytes.NewReader(openaiBody(c.model, c.msgs, c.tools)))
				if err != nil {
					t.Fatal(err)
				}
				var v struct {
					Usage struct {
						PromptTokens int `json:"prompt_tokens"`
					} `json:"usage"`
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || json.Unmarshal(data, &v) != nil {
					t.Fatalf("%s %s: %d %s", c.model, route, resp.StatusCode, data)
				}
				sent, eval = headerInt(t, resp.Header, "X-Ctxproxy-Tokens"), v.Usage.PromptTokens
			}
			guess, bytes4 := guesses(c.model, c.msgs, c.tools)
			rows = append(rows, exactRow{c.model, route, sent, eval, guess, bytes4})
			p.stop()
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "first request of a fresh ctxproxy, calibration off\n%-14s %-22s %8s %8s %8s %9s %9s\n",
		"model", "route", "sent", "ollama", "error", "tiktoken", "bytes/4")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-14s %-22s %8d %8d %+7.2f%% %+8.1f%% %+8.1f%%\n", r.model, r.route, r.sent, r.evalCount,
			100*relErr(r.sent, r.evalCount), 100*relErr(r.guess, r.evalCount), 100*relErr(r.bytesFour, r.evalCount))
	}
	t.Log(b.String())
	for _, r := range rows {
		if r.evalCount == 0 {
			t.Errorf("%s %s: Ollama reported no prompt tokens", r.model, r.route)
			continue
		}
		if e := relErr(r.sent, r.evalCount); math.Abs(e) > exactTolerance {
			t.Errorf("%s %s: X-Ctxproxy-Tokens %d vs prompt_eval_count %d: %+.2f%%, want within ±1%%", r.model, r.route, r.sent, r.evalCount, 100*e)
		}
		for name, g := range map[string]int{"tiktoken": r.guess, "bytes/4": r.bytesFour} {
			if e := relErr(g, r.evalCount); math.Abs(e) <= exactTolerance {
				t.Errorf("%s: a %s guess (%d) is within 1%% of %d too: the test cannot tell a tokenizer from a guess", r.model, name, g, r.evalCount)
			}
		}
	}
}

// guesses are what an estimator without the model's tokenizer says of a
// conversation: ctxproxy's own tiktoken count (uncalibrated) and
// bytes/4.
func guesses(model string, msgs []api.Message, tools json.RawMessage) (tiktoken, bytes4 int) {
	counter := budget.NewRegistry(budget.Config{}, nil).MessageCounter(model)
	var text strings.Builder
	for _, m := range msgs {
		text.WriteString(m.Role + m.Content)
	}
	text.Write(tools)
	return counter.CountText(text.String()) + 3*len(msgs), (text.Len() + 3) / 4
}

// TestRealOllama_Growing200 is the long run: a conversation grows
// over 200 turns, each request carrying the whole history and Ollama's
// last reply, with context.max_size 2048. Every request is answered,
// Ollama truncates nothing, and every count is within ±1% of Ollama's.
func TestRealOllama_Growing200(t *testing.T) {
	o := need(t)
	g := generated[0]
	ensureModel(t, o, g.name, g.vocab())
	p := startCtxproxy(t, o.url, "backend: {kind: ollama}\ncontext: {max_size: 2048, reserve_output: 256}\ntokens: {calibrate: false}\n")
	msgs := conversation(900, 1)
	start := time.Now()
	worst, trimmed := 0.0, 0
	for turn := range 200 {
		res := chat(t, p.url, chatRequest{Model: g.name, Messages: msgs}, "X-Session-ID", "e2e-growing-200")
		sent, limit := headerInt(t, res.header, "X-Ctxproxy-Tokens"), headerInt(t, res.header, "X-Ctxproxy-Limit")
		eval := res.final.PromptEvalCount
		e := relErr(sent, eval)
		worst = max(worst, math.Abs(e))
		if math.Abs(e) > exactTolerance || sent > limit {
			t.Fatalf("turn %d: sent %d, prompt_eval_count %d (%+.2f%%), limit %d", turn, sent, eval, 100*e, limit)
		}
		if headerInt(t, res.header, "X-Ctxproxy-Dropped") > 0 {
			trimmed++
		}
		msgs = append(msgs, api.Message{Role: "assistant", Content: res.content},
			api.Message{Role: "user", Content: fmt.Sprintf("Turn %d. %s", turn, conversation(901+uint64(turn), 1)[1].Content)})
	}
	n, _ := p.metric(t, "ctxproxy_backend_truncations_total")
	t.Logf("200 turns in %s: %d trimmed, worst count error %.2f%%, truncations %v", time.Since(start).Round(time.Second), trimmed, 100*worst, n)
	if n != 0 {
		t.Errorf("ctxproxy_backend_truncations_total = %v, want 0", n)
	}
	if trimmed == 0 {
		t.Errorf("the conversation never outgrew the window: the run proves nothing")
	}
}

// TestRealOllama_OverflowRetry: with a counter that badly undercounts
// (approximate, 2 bytes a token for a model that needs about one, no
// calibration, no exact counting), ctxproxy forwards a prompt it thinks
// fits; Ollama, told "truncate": false, refuses it; ctxproxy cuts harder
// and resends, and the client gets its answer, with no truncation.
func TestRealOllama_OverflowRetry(t *testing.T) {
	o := need(t)
	p := startCtxproxy(t, o.url, `
backend: {kind: ollama}
context: {auto_size: false, target_size: 2048, reserve_output: 16}
tokens: {exact: false, calibrate: false, encoding: approximate, approx_chars_per_token: 2}
`)
	res := chat(t, p.url, chatRequest{Model: modelTiny, Messages: conversation(950, 30)}, "X-Session-ID", "e2e-overflow-retry")
	retries, _ := p.metric(t, "ctxproxy_overflow_retries_total")
	failures, _ := p.metric(t, "ctxproxy_overflow_failures_total")
	t.Logf("sent (estimate) %d, Ollama evaluated %d, num_ctx %d, %v retries; warnings %q",
		headerInt(t, res.header, "X-Ctxproxy-Tokens"), res.final.PromptEvalCount, headerInt(t, res.header, "X-Ctxproxy-Num-Ctx"),
		retries, res.header.Values("X-Ctxproxy-Warning"))
	if retries < 1 || failures != 0 {
		t.Errorf("overflow retries %v, failures %v: want at least one retry that recovered", retries, failures)
	}
	if res.final.PromptEvalCount > 2048 || res.final.PromptEvalCount == 0 {
		t.Errorf("Ollama evaluated %d tokens with num_ctx 2048", res.final.PromptEvalCount)
	}
	if n, _ := p.metric(t, "ctxproxy_backend_truncations_total"); n != 0 {
		t.Errorf("truncations %v", n)
	}
}
