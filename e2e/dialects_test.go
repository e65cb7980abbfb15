//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/ollama/ollama/api"
)

// TestRealOllama_SDKClients runs the real client SDKs of e2e/sdk (npm
// openai responses.create, the AI SDK's default provider, and
// @anthropic-ai/sdk messages.create / messages.stream) against the built
// ctxproxy in front of the real Ollama: every check passes, every
// answer carries X-Ctxproxy-* headers, and the session is recorded.
func TestRealOllama_SDKClients(t *testing.T) {
	o := need(t)
	// Without Node.js the checks skip, unless CI is set: .ci/run
	// installs it, so a missing one there is a failure.
	missing := t.Skip
	if os.Getenv(envCI) != "" {
		missing = t.Fatal
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		missing("npm is not installed: the SDK checks need Node.js and npm (e2e/sdk/README.md)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed: the SDK checks need Node.js (e2e/sdk/README.md)")
	}
	dir := filepath.Join(suite.repo, "e2e", "sdk")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// npm ci installs exactly the lockfile's versions; the cache makes
	// later runs local.
	ci := exec.CommandContext(ctx, npm, "ci", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error")
	ci.Dir = dir
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}

	p := startCtxproxy(t, o.url, smallWindow)
	session := "e2e-sdk clients"
	run := exec.CommandContext(ctx, node, "run-all.mjs")
	run.Dir = dir
	run.Env = append(os.Environ(), "BASE_URL="+p.url, "MODEL="+modelTools, "SESSION_ID="+session)
	var stderr bytes.Buffer
	run.Stderr = &stderr
	out, runErr := run.Output()
	checks := 0
	// The SDKs send their API key, so the session is scoped to it
	// (session.scope_header: Authorization): X-Ctxproxy-Session names
	// the id it is stored under.
	stored := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var c struct {
			Check   string              `json:"check"`
			OK      bool                `json:"ok"`
			Error   string              `json:"error"`
			Headers []map[string]string `json:"headers"`
		}
		if err := json.Unmarshal(line, &c); err != nil {
			t.Errorf("unreadable line %s: %v", line, err)
			continue
		}
		checks++
		t.Logf("%s", line)
		if !c.OK {
			t.Errorf("check %s failed: %s", c.Check, c.Error)
		}
		if len(c.Headers) == 0 {
			t.Errorf("check %s made no request", c.Check)
		}
		for i, h := range c.Headers {
			if h["x-ctxproxy-session"] == "" || h["x-ctxproxy-tokens"] == "" || h["x-ctxproxy-num-ctx"] == "" {
				t.Errorf("check %s, request %d: x-ctxproxy headers missing: %v", c.Check, i, h)
			}
			if strings.HasPrefix(c.Check, "messages") && stored == "" {
				stored = h["x-ctxproxy-session"]
			}
		}
	}
	if checks < 6 {
		t.Errorf("only %d checks reported; stderr:\n%s", checks, stderr.String())
	}
	if runErr != nil {
		t.Errorf("node run-all.mjs: %v\n%s", runErr, stderr.String())
	}
	if !strings.HasPrefix(stored, session+"~") {
		t.Errorf("the session is stored as %q: want %q scoped to the SDKs' key", stored, session)
	}
	status, body := p.get(t, "/ctxproxy/sessions/"+url.PathEscape(stored)+"/export")
	if status != http.StatusOK || !bytes.Contains(body, []byte(`"dialect":"messages"`)) {
		t.Errorf("the SDKs' session is not recorded: %d %.400s", status, body)
	}
}

// TestRealOllama_Dialects110Turns: a 110-turn conversation with tool
// calls through /v1/responses and /v1/messages is trimmed to the window,
// and the prompt the real Ollama evaluated (the reply's input_tokens)
// equals ctxproxy's X-Ctxproxy-Tokens within 1%, with no truncation line
// in Ollama's log; the same with the Responses body zstd-compressed and
// the Messages body gzipped (decoded, counted and trimmed, sent plain).
// Sent directly to Ollama's own /v1 routes, the same conversation is cut
// silently to its default window.
func TestRealOllama_Dialects110Turns(t *testing.T) {
	o := need(t)
	p := startCtxproxy(t, o.url, smallWindow)
	conv := turns110(1100)
	for _, route := range []struct {
		name, path string
		body       func([]api.Message, bool) []byte
		// encoding compresses the body sent through ctxproxy (Codex
		// sends its Responses requests zstd-compressed).
		encoding string
	}{
		{"responses", "/v1/responses", responsesRequest, ""},
		{"messages", "/v1/messages", messagesRequest, ""},
		{"responses-zstd", "/v1/responses", responsesRequest, "zstd"},
		{"messages-gzip", "/v1/messages", messagesRequest, "gzip"},
	} {
		t.Run(route.name, func(t *testing.T) {
			direct := postDialect(t, o.url+route.path, route.body(conv, false), nil)
			mark := o.logMark(t)
			hdr := map[string]string{"X-Session-ID": "e2e-110-" + route.name}
			body := route.body(conv, false)
			if route.encoding != "" {
				hdr["Content-Encoding"] = route.encoding
				body = compressed(t, route.encoding, body)
			}
			res := postDialect(t, p.url+route.path, body, hdr)
			lines := o.logSince(t, mark)
			sent := headerInt(t, res.header, "X-Ctxproxy-Tokens")
			before := headerInt(t, res.header, "X-Ctxproxy-Tokens-Before")
			t.Logf("%s: %d messages; directly to Ollama's %s input_tokens %d; through ctxproxy: %d tokens as sent, %d forwarded (X-Ctxproxy-Tokens), Ollama's input_tokens %d (%+.2f%%); headers %v",
				route.name, len(conv), route.path, direct.inputTokens, before, sent, res.inputTokens, 100*relErr(sent, res.inputTokens), ctxproxyHeaders(res.header))
			if headerInt(t, res.header, "X-Ctxproxy-Dropped") <= 0 || before <= numCtx {
				t.Errorf("not trimmed: %v", ctxproxyHeaders(res.header))
			}
			if e := relErr(sent, res.inputTokens); math.Abs(e) > exactTolerance {
				t.Errorf("X-Ctxproxy-Tokens %d vs Ollama's input_tokens %d: %+.1f%%, want within ±1%%", sent, res.inputTokens, 100*e)
			}
			if res.inputTokens > numCtx {
				t.Errorf("Ollama evaluated %d tokens with num_ctx %d", res.inputTokens, numCtx)
			}
			if trunc := grep(lines, truncationLine); len(trunc) > 0 {
				t.Errorf("Ollama truncated what ctxproxy forwarded:\n%s", strings.Join(trunc, "\n"))
			}
			if routes := routesIn(lines); !slices.Contains(routes, "POST /api/chat") || slices.Contains(routes, "POST "+route.path) {
				t.Errorf("Ollama served %v, want POST /api/chat", routes)
			}
		})
	}
}

// compressed is body compressed with encoding, gzip or zstd.
func compressed(t *testing.T, encoding string, body []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch encoding {
	case "gzip":
		w = gzip.NewWriter(&buf)
	case "zstd":
		z, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w = z
	default:
		t.Fatalf("no encoding %q", encoding)
	}
	if _, err := w.Write(body); err != nil || w.Close() != nil {
		t.Fatalf("compressing with %s: %v", encoding, err)
	}
	return buf.Bytes()
}

// turns110 is a conversation of 110 user turns with the assistant's
// answers, every tenth answered after a call to get_weather and its result.
func turns110(seed uint64) []api.Message {
	r := rand.New(rand.NewPCG(seed, 0x110))
	msgs := []api.Message{{Role: "system", Content: fmt.Sprintf("You answer briefly. Conversation %d.", seed)}}
	for i := range 110 {
		if i > 0 {
			msgs = append(msgs, api.Message{Role: "assistant", Content: prose(r, 50+r.IntN(40))})
		}
		city := cities[r.IntN(len(cities))]
		msgs = append(msgs, api.Message{Role: "user", Content: fmt.Sprintf("Question %d about %s: %s", i+1, city, prose(r, 60+r.IntN(50)))})
		if i%10 == 5 {
			msgs = append(msgs,
				api.Message{Role: "assistant", ToolCalls: []api.ToolCall{toolCall(0, "get_weather", city)}},
				api.Message{Role: "tool", ToolName: "get_weather", Content: fmt.Sprintf("Weather in %s: %s", city, prose(r, 80))})
		}
	}
	return msgs
}

// responsesRequest is conv as a Responses API request: instructions, then
// message, function_call and function_call_output items.
func responsesRequest(conv []api.Message, stream bool) []byte {
	var input []any
	call := ""
	for i, m := range conv[1:] {
		switch {
		case len(m.ToolCalls) > 0:
			call = fmt.Sprintf("call_%d", i)
			args, _ := json.Marshal(m.ToolCalls[0].Function.Arguments)
			input = append(input, map[string]any{"type": "function_call", "call_id": call, "name": m.ToolCalls[0].Function.Name, "arguments": string(args)})
		case m.Role == "tool":
			input = append(input, map[string]any{"type": "function_call_output", "call_id": call, "output": m.Content})
		case m.Role == "assistant":
			input = append(input, map[string]any{"type": "message", "role": "assistant",
				"content": []any{map[string]any{"type": "output_text", "text": m.Content}}})
		default:
			input = append(input, map[string]any{"role": m.Role, "content": m.Content})
		}
	}
	b, _ := json.Marshal(map[string]any{"model": modelTools, "instructions": conv[0].Content, "input": input,
		"stream": stream, "max_output_tokens": 16, "tools": []any{map[string]any{"type": "function", "name": "get_weather",
			"description": "Current weather in a city", "parameters": json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}}})
	return b
}

// messagesRequest is conv as an Anthropic Messages request: system, then
// messages with tool_use and tool_result blocks.
func messagesRequest(conv []api.Message, stream bool) []byte {
	var msgs []any
	call := ""
	for i, m := range conv[1:] {
		switch {
		case len(m.ToolCalls) > 0:
			call = fmt.Sprintf("toolu_%d", i)
			msgs = append(msgs, map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use",
				"id": call, "name": m.ToolCalls[0].Function.Name, "input": m.ToolCalls[0].Function.Arguments}}})
		case m.Role == "tool":
			msgs = append(msgs, map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result",
				"tool_use_id": call, "content": m.Content}}})
		default:
			msgs = append(msgs, map[string]any{"role": m.Role, "content": m.Content})
		}
	}
	b, _ := json.Marshal(map[string]any{"model": modelTools, "system": conv[0].Content, "messages": msgs,
		"stream": stream, "max_tokens": 16, "tools": []any{map[string]any{"name": "get_weather",
			"description": "Current weather in a city", "input_schema": json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}}})
	return b
}

type dialectResult struct {
	header      http.Header
	inputTokens int
}

// postDialect posts a non-streamed Responses or Messages request and
// reads usage.input_tokens from the answer.
func postDialect(t *testing.T, u string, body []byte, hdr map[string]string) dialectResult {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", u, resp.StatusCode, b)
	}
	var v struct {
		Usage struct {
			InputTokens int `json:"input_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Usage.InputTokens == 0 {
		t.Fatalf("POST %s: no usage.input_tokens in %s", u, b)
	}
	return dialectResult{header: resp.Header, inputTokens: v.Usage.InputTokens}
}
