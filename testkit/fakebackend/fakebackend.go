// Package fakebackend is an in-process stand-in for Ollama and for an
// OpenAI-compatible server, for ctxproxy's tests. It speaks each wire
// format the way the real servers do — NDJSON streams ending in
// "done": true with prompt_eval_count for Ollama, SSE streams ending in
// "data: [DONE]" with usage for OpenAI — records every request it gets, and
// can be told to misbehave: stall before headers, hold a stream between
// chunks, die mid-stream, or truncate a prompt silently at num_ctx as
// Ollama does.
package fakebackend

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"time"
)

// Kind is which server the fake plays.
type Kind int

const (
	// Ollama serves /api/* and Ollama's OpenAI layer at /v1/*.
	Ollama Kind = iota
	// OpenAI serves /v1/* only.
	OpenAI
)

// Request is one request the backend received.
type Request struct {
	Method   string
	Path     string
	RawQuery string
	Header   http.Header
	Body     []byte
}

// ToolCall is a call the fake's reply makes when Options.ToolCalls is set.
type ToolCall struct {
	ID        string
	Name      string
	Arguments map[string]any
}

// Options shape the fake's behaviour. The zero value answers every chat
// with Reply in a few chunks.
type Options struct {
	// Reply is the assistant's answer (default "Hello from the fake backend.").
	Reply string
	// ReplyFunc, when set, answers each chat request instead of Reply,
	// given its body; it may return "" for an empty answer.
	ReplyFunc func(body []byte) string
	// Chunks is how many stream chunks the reply is split into (default 3).
	Chunks int
	// ToolCalls, when set, makes the reply an assistant tool call.
	ToolCalls []ToolCall
	// Thinking is Ollama's message.thinking of the reply.
	Thinking string
	// Tokenize is the backend's "true" tokenizer, used for
	// prompt_eval_count / usage.prompt_tokens (default TrueTokens).
	Tokenize func(text string) int
	// DefaultNumCtx is Ollama's context when a request sets no num_ctx
	// (default 4096). A longer prompt is cut silently, as Ollama does.
	DefaultNumCtx int
	// ContextLimit makes the OpenAI fake reject prompts over it with 400
	// context_length_exceeded; 0 means no limit.
	ContextLimit int
	// ModelInfo is /api/show's model_info (default: a llama 3.1 8B).
	ModelInfo map[string]any
	// Modelfile is /api/show's modelfile (default "FROM llama3.1"), its
	// PARAMETER lines the model's own options.
	Modelfile string
	// PromptCached, when set, is the prompt_eval_cached_count of every
	// /api/chat answer, as Ollama 0.30 and later report it.
	PromptCached *int
	// Capabilities is /api/show's capabilities (default completion and
	// tools). A chat request that turns thinking on for a model without
	// "thinking" is refused as Ollama refuses it.
	Capabilities []string
	// Hold, when set, holds a stream after its first chunk until Hold is
	// closed, to prove the proxy does not buffer.
	Hold chan struct{}
	// Stall, when set, delays the response headers until it is closed or
	// the request is cancelled.
	Stall chan struct{}
	// HoldVerbose, when set, holds a verbose /api/show (the vocabulary,
	// which a real server takes a while to send) until it is closed or
	// the request is cancelled.
	HoldVerbose chan struct{}
	// DieAfter > 0 kills the connection after that many stream chunks,
	// without the final chunk.
	DieAfter int
	// ChunkDelay is a pause between stream chunks.
	ChunkDelay time.Duration
	// Status, when non-zero, answers chat requests with this status and
	// ErrorMessage in the dialect's error shape.
	Status       int
	ErrorMessage string
	// Model, when set, is the Ollama fake's one model with a real
	// vocabulary and template (see Model); Pretokenizer is its
	// tokenizer's pre-tokenizer expressions (nil: GPT-2's).
	Model        *ModelSpec
	Pretokenizer []string
	// TokenizeAPI makes the OpenAI fake serve a tokenize API: TokenizeVLLM
	// or TokenizeLlamaCpp (see tokenize.go). With llama.cpp's, usage
	// counts the prompt its template renders.
	TokenizeAPI string
}

// Fake is a running fake server.
type Fake struct {
	*httptest.Server
	Kind Kind

	mu            sync.Mutex
	opts          Options
	requests      []Request
	noRecord      bool
	tokenizeCalls int
	// cancelled receives a value when a chat request's context ends
	// before its response was complete (the client or proxy hung up).
	cancelled chan struct{}
}

// New starts a fake backend of kind k; it is closed when the test ends.
func New(t interface{ Cleanup(func()) }, k Kind, opts Options) *Fake {
	b := &Fake{Kind: k, opts: opts, cancelled: make(chan struct{}, 16)}
	b.Server = httptest.NewServer(b)
	t.Cleanup(b.Close)
	return b
}

// Handler returns a fake backend that is not started, for serving it on
// a listener of one's own (the load test's standalone server). It keeps
// no request log, so it can serve millions of requests.
func Handler(k Kind, opts Options) *Fake {
	return &Fake{Kind: k, opts: opts, cancelled: make(chan struct{}, 16), noRecord: true}
}

// SetOptions replaces the behaviour for later requests.
func (b *Fake) SetOptions(opts Options) {
	b.mu.Lock()
	b.opts = opts
	b.mu.Unlock()
}

func (b *Fake) options() Options {
	b.mu.Lock()
	defer b.mu.Unlock()
	o := b.opts
	if o.Reply == "" {
		o.Reply = "Hello from the fake backend."
	}
	if o.Chunks <= 0 {
		o.Chunks = 3
	}
	if o.Tokenize == nil {
		o.Tokenize = TrueTokens
	}
	if o.DefaultNumCtx == 0 {
		o.DefaultNumCtx = 4096
	}
	if o.ModelInfo == nil {
		o.ModelInfo = Llama31ModelInfo()
	}
	if o.Modelfile == "" {
		o.Modelfile = "FROM llama3.1"
	}
	if o.Capabilities == nil {
		o.Capabilities = []string{"completion", "tools"}
	}
	if o.Model != nil {
		o.Model.init(o.Pretokenizer)
	}
	return o
}

// Requests returns the requests received so far.
func (b *Fake) Requests() []Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Request(nil), b.requests...)
}

// Last returns the last request received on path, and whether there was one.
func (b *Fake) Last(path string) (Request, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := len(b.requests) - 1; i >= 0; i-- {
		if b.requests[i].Path == path {
			return b.requests[i], true
		}
	}
	return Request{}, false
}

// Cancelled is signalled when a chat request is cancelled mid-response.
func (b *Fake) Cancelled() <-chan struct{} { return b.cancelled }

func (b *Fake) signalCancel() {
	select {
	case b.cancelled <- struct{}{}:
	default:
	}
}

// TrueTokens is the fake's tokenizer: one token per three bytes, rounded
// up. It is deliberately unlike tiktoken, as a local model's is.
func TrueTokens(text string) int { return (len(text) + 2) / 3 }

// ServeHTTP answers like the backend of kind b.Kind.
func (b *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if !b.noRecord {
		b.mu.Lock()
		b.requests = append(b.requests, Request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
			Header: r.Header.Clone(), Body: body})
		b.mu.Unlock()
	}
	o := b.options()

	if b.Kind == OpenAI && b.serveTokenize(w, r, body, o) {
		return
	}
	switch {
	case b.Kind == Ollama && r.URL.Path == "/":
		io.WriteString(w, "Ollama is running")
	case b.Kind == Ollama && r.URL.Path == "/api/version":
		writeJSON(w, 200, map[string]any{"version": "0.17.4"})
	case b.Kind == Ollama && r.URL.Path == "/api/tags" && o.Model != nil:
		writeJSON(w, 200, map[string]any{"models": []any{map[string]any{
			"name": "tiny:latest", "model": "tiny:latest", "size": 444000, "digest": o.Model.Digest}}})
	case b.Kind == Ollama && r.URL.Path == "/api/show" && o.Model != nil:
		var req struct {
			Verbose bool `json:"verbose"`
		}
		_ = json.Unmarshal(body, &req)
		if !req.Verbose || b.stall(r, Options{Stall: o.HoldVerbose}) {
			writeJSON(w, 200, o.Model.show(req.Verbose))
		}
	case b.Kind == Ollama && r.URL.Path == "/api/tags":
		writeJSON(w, 200, map[string]any{"models": []any{map[string]any{
			"name": "llama3.1:8b", "model": "llama3.1:8b", "size": 4920753328,
			"details": map[string]any{"family": "llama", "parameter_size": "8.0B", "quantization_level": "Q4_K_M"},
		}}})
	case b.Kind == Ollama && r.URL.Path == "/api/ps":
		writeJSON(w, 200, map[string]any{"models": []any{}})
	case b.Kind == Ollama && r.URL.Path == "/api/show":
		writeJSON(w, 200, map[string]any{
			"modelfile": o.Modelfile, "parameters": parameters(o.Modelfile), "template": "{{ .Prompt }}",
			"details":    map[string]any{"family": "llama", "parameter_size": "8.0B", "quantization_level": "Q4_K_M"},
			"model_info": o.ModelInfo, "capabilities": o.Capabilities,
		})
	case b.Kind == Ollama && r.URL.Path == "/api/chat":
		b.ollamaChat(w, r, body, o)
	case b.Kind == Ollama && r.URL.Path == "/api/generate":
		b.ollamaGenerate(w, body, o)
	case r.URL.Path == "/v1/models":
		writeJSON(w, 200, map[string]any{"object": "list", "data": []any{map[string]any{
			"id": "gpt-4o", "object": "model", "created": 1700000000, "owned_by": "fake"}}})
	case r.URL.Path == "/v1/chat/completions":
		b.openaiChat(w, r, body, o)
	case r.URL.Path == "/v1/responses" || r.URL.Path == "/v1/messages": // Ollama serves both too
		b.dialectChat(w, r, body, o)
	default:
		if b.Kind == Ollama {
			// Ollama's router (gin) answers an unknown route in plain text.
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, "404 page not found")
		} else {
			writeJSON(w, 404, openaiError("Unknown request URL: "+r.Method+" "+r.URL.Path, "invalid_request_error", ""))
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func openaiError(msg, typ, code string) map[string]any {
	var c any
	if code != "" {
		c = code
	}
	return map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}}
}

// chatBody is the part of a chat request the fake reads.
type chatBody struct {
	Model    string `json:"model"`
	Stream   *bool  `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Options struct {
		NumCtx int `json:"num_ctx"`
	} `json:"options"`
	Truncate      *bool           `json:"truncate"`
	Think         json.RawMessage `json:"think"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// promptTokens counts the prompt as the fake's model sees it: each message
// as role + content plus four tokens of template.
func promptTokens(c chatBody, tokenize func(string) int) int {
	n := 0
	for _, m := range c.Messages {
		var s string
		if json.Unmarshal(m.Content, &s) != nil {
			s = string(m.Content)
		}
		n += tokenize(m.Role) + tokenize(s) + 4
	}
	return n
}

func splitReply(s string, n int) []string {
	if n > len(s) {
		n = max(len(s), 1)
	}
	var out []string
	size := (len(s) + n - 1) / n
	for i := 0; i < len(s); i += size {
		out = append(out, s[i:min(i+size, len(s))])
	}
	if len(out) == 0 {
		out = []string{""}
	}
	return out
}

// streamer writes stream chunks and applies Hold, DieAfter and ChunkDelay.
type streamer struct {
	w     http.ResponseWriter
	r     *http.Request
	o     Options
	b     *Fake
	count int
}

// chunk writes one chunk; it returns false when the stream must stop.
func (s *streamer) chunk(data string) bool {
	if s.o.DieAfter > 0 && s.count >= s.o.DieAfter {
		// Drop the connection without finishing the response.
		panic(http.ErrAbortHandler)
	}
	if s.count > 0 {
		if s.o.Hold != nil && s.count == 1 {
			select {
			case <-s.o.Hold:
			case <-s.r.Context().Done():
				s.b.signalCancel()
				return false
			}
		}
		if s.o.ChunkDelay > 0 {
			select {
			case <-time.After(s.o.ChunkDelay):
			case <-s.r.Context().Done():
				s.b.signalCancel()
				return false
			}
		}
	}
	if _, err := io.WriteString(s.w, data); err != nil {
		s.b.signalCancel()
		return false
	}
	s.w.(http.Flusher).Flush()
	s.count++
	return true
}

func (b *Fake) stall(r *http.Request, o Options) bool {
	if o.Stall == nil {
		return true
	}
	select {
	case <-o.Stall:
		return true
	case <-r.Context().Done():
		b.signalCancel()
		return false
	}
}

func (b *Fake) ollamaChat(w http.ResponseWriter, r *http.Request, body []byte, o Options) {
	if !b.stall(r, o) {
		return
	}
	var c chatBody
	if err := json.Unmarshal(body, &c); err != nil {
		writeJSON(w, 400, map[string]any{"error": "invalid character in request body"})
		return
	}
	if o.Status != 0 {
		writeJSON(w, o.Status, map[string]any{"error": o.ErrorMessage})
		return
	}
	if c.Think != nil && string(c.Think) != "false" && string(c.Think) != "null" && !slices.Contains(o.Capabilities, "thinking") {
		writeJSON(w, 400, map[string]any{"error": fmt.Sprintf("%q does not support thinking", c.Model)})
		return
	}
	if o.ReplyFunc != nil {
		o.Reply = o.ReplyFunc(body)
	}
	numCtx := c.Options.NumCtx
	if numCtx <= 0 {
		numCtx = o.DefaultNumCtx
	}
	prompt := promptTokens(c, o.Tokenize)
	if o.Model != nil {
		prompt = o.Model.promptTokens(body)
	}
	if prompt > numCtx && c.Truncate != nil && !*c.Truncate {
		// What Ollama's runner answers with "truncate": false.
		writeJSON(w, 400, map[string]any{"error": "the input length exceeds the context length"})
		return
	}
	// Ollama drops old messages silently when the prompt does not fit
	// num_ctx and still answers 200 (Ollama #2714, #7043).
	prompt = min(prompt, numCtx)
	created := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC).Format(time.RFC3339Nano)
	msg := func(content string) map[string]any {
		m := map[string]any{"role": "assistant", "content": content}
		return m
	}
	final := map[string]any{
		"model": c.Model, "created_at": created, "done": true, "done_reason": "stop",
		"total_duration": 123456789, "load_duration": 1234567, "prompt_eval_count": prompt,
		"prompt_eval_duration": 2345678, "eval_count": o.Tokenize(o.Reply), "eval_duration": 3456789,
	}
	if o.PromptCached != nil {
		final["prompt_eval_cached_count"] = min(*o.PromptCached, prompt)
	}
	var calls []any
	for i, tc := range o.ToolCalls {
		calls = append(calls, map[string]any{"id": tc.ID, "function": map[string]any{
			"index": i, "name": tc.Name, "arguments": tc.Arguments}})
	}
	stream := c.Stream == nil || *c.Stream
	if !stream {
		m := msg(o.Reply)
		if len(calls) > 0 {
			m["content"] = ""
			m["tool_calls"] = calls
		}
		if o.Thinking != "" {
			m["thinking"] = o.Thinking
		}
		final["message"] = m
		writeJSON(w, 200, final)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(200)
	s := &streamer{w: w, r: r, o: o, b: b}
	line := func(v any) string { d, _ := json.Marshal(v); return string(d) + "\n" }
	if o.Thinking != "" {
		m := msg("")
		m["thinking"] = o.Thinking
		if !s.chunk(line(map[string]any{"model": c.Model, "created_at": created, "message": m, "done": false})) {
			return
		}
	}
	if len(calls) > 0 {
		m := msg("")
		m["tool_calls"] = calls
		if !s.chunk(line(map[string]any{"model": c.Model, "created_at": created, "message": m, "done": false})) {
			return
		}
	} else {
		for _, part := range splitReply(o.Reply, o.Chunks) {
			if !s.chunk(line(map[string]any{"model": c.Model, "created_at": created, "message": msg(part), "done": false})) {
				return
			}
		}
	}
	final["message"] = msg("")
	s.chunk(line(final))
}

func (b *Fake) openaiChat(w http.ResponseWriter, r *http.Request, body []byte, o Options) {
	if !b.stall(r, o) {
		return
	}
	var c chatBody
	if err := json.Unmarshal(body, &c); err != nil {
		writeJSON(w, 400, openaiError("We could not parse the JSON body of your request.", "invalid_request_error", ""))
		return
	}
	if o.Status != 0 {
		writeJSON(w, o.Status, openaiError(o.ErrorMessage, "invalid_request_error", ""))
		return
	}
	if o.ReplyFunc != nil {
		o.Reply = o.ReplyFunc(body)
	}
	prompt := promptTokens(c, o.Tokenize)
	if o.TokenizeAPI == TokenizeLlamaCpp {
		prompt = o.Tokenize(llamaCppTemplate(c))
	}
	if b.Kind == Ollama {
		// Ollama's OpenAI layer ignores num_ctx: the default context
		// applies and longer prompts are cut (Ollama #5356).
		prompt = min(prompt, o.DefaultNumCtx)
	}
	if o.ContextLimit > 0 && prompt > o.ContextLimit {
		writeJSON(w, 400, openaiError(fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens.", o.ContextLimit, prompt), "invalid_request_error", "context_length_exceeded"))
		return
	}
	completion := o.Tokenize(o.Reply)
	usage := map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
	id, created := "chatcmpl-fake123", 1700000000
	var calls []any
	for i, tc := range o.ToolCalls {
		args, _ := json.Marshal(tc.Arguments)
		calls = append(calls, map[string]any{"index": i, "id": tc.ID, "type": "function",
			"function": map[string]any{"name": tc.Name, "arguments": string(args)}})
	}
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
	}
	if c.Stream == nil || !*c.Stream {
		m := map[string]any{"role": "assistant", "content": o.Reply}
		if len(calls) > 0 {
			m["content"] = nil
			m["tool_calls"] = calls
		}
		writeJSON(w, 200, map[string]any{"id": id, "object": "chat.completion", "created": created, "model": c.Model,
			"choices": []any{map[string]any{"index": 0, "message": m, "finish_reason": finish}}, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
	s := &streamer{w: w, r: r, o: o, b: b}
	event := func(delta map[string]any, finish any) string {
		d, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": c.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
		return "data: " + string(d) + "\n\n"
	}
	if !s.chunk(event(map[string]any{"role": "assistant", "content": ""}, nil)) {
		return
	}
	if len(calls) > 0 {
		if !s.chunk(event(map[string]any{"tool_calls": calls}, nil)) {
			return
		}
	} else {
		for _, part := range splitReply(o.Reply, o.Chunks) {
			if !s.chunk(event(map[string]any{"content": part}, nil)) {
				return
			}
		}
	}
	if !s.chunk(event(map[string]any{}, finish)) {
		return
	}
	if c.StreamOptions.IncludeUsage {
		d, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created,
			"model": c.Model, "choices": []any{}, "usage": usage})
		if !s.chunk("data: " + string(d) + "\n\n") {
			return
		}
	}
	s.chunk("data: [DONE]\n\n")
}
