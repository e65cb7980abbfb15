package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ollama/ollama/api"
	openai "github.com/sashabaranov/go-openai"
)

// SummarizerConfig is the backend's side of the summarize: section of the
// configuration.
// The zero value works.
type SummarizerConfig struct {
	// Model writes summaries (summarize.model); "" means the model the
	// request names (rewrite.SummaryRequest.Model), which the strategy
	// sets to the chat request's own model.
	Model string
	// MaxTokens bounds an answer when a request sets no bound
	// (summarize.max_tokens; default rewrite.DefaultSummaryTokens).
	MaxTokens int
	// Timeout bounds one call (summarize.timeout; default
	// rewrite.DefaultSummaryTimeout).
	Timeout time.Duration
	// OwnBackend is set for a summarizer on a backend of its own
	// (summarize.backend): the clients' credentials are for the proxy's
	// backend and never go there; Auth (summarize.api_key, as "Bearer
	// KEY"), when set, does instead.
	OwnBackend bool
	Auth       string
}

// summMaxAnswer bounds the answer body read from the backend.
const summMaxAnswer = 1 << 20

// Summarizer is rewrite.Summarizer over ctxproxy's own backend: the
// backend's model summarizes the conversations it serves. It calls
// Ollama's POST /api/chat without streaming, or an OpenAI-compatible POST
// /v1/chat/completions through go-openai, with rewrite.SummaryPrompt and
// the client's Authorization header. It is safe for concurrent use.
type Summarizer struct {
	backend string
	kind    func() string
	cfg     SummarizerConfig
	client  *http.Client
	log     *slog.Logger
}

var _ rewrite.Summarizer = (*Summarizer)(nil)

// NewSummarizer returns a Summarizer for the backend at backendURL. kind
// says, per call, which API the backend speaks: "openai" for an
// OpenAI-compatible server, anything else (nil included) for Ollama — the
// proxy passes its detected backend kind. client carries the calls (nil:
// http.DefaultClient); share the proxy's transport, not its 5-second
// readiness timeout. log may be nil.
func NewSummarizer(backendURL string, kind func() string, cfg SummarizerConfig, client *http.Client, log *slog.Logger) *Summarizer {
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = rewrite.DefaultSummaryTokens
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = rewrite.DefaultSummaryTimeout
	}
	if client == nil {
		client = http.DefaultClient
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if kind == nil {
		kind = func() string { return "ollama" }
	}
	return &Summarizer{backend: strings.TrimRight(backendURL, "/"), kind: kind, cfg: cfg, client: client, log: log}
}

// Summarize implements rewrite.Summarizer. The answer is cleaned and cut
// to the token bound (rewrite.TrimSummary, at about 4 bytes a token) in
// case the backend ignores it; an empty one is rewrite.ErrEmptySummary.
func (s *Summarizer) Summarize(ctx context.Context, req rewrite.SummaryRequest) (string, error) {
	model := s.cfg.Model
	if model == "" {
		model = req.Model
	}
	if model == "" {
		return "", errors.New("proxy: summarize: no model to summarize with")
	}
	if req.MaxTokens <= 0 {
		req.MaxTokens = s.cfg.MaxTokens
	}
	if s.cfg.OwnBackend {
		req.Auth = s.cfg.Auth
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	system, user := req.Prompt()
	kind := s.kind()
	start := time.Now()
	var text string
	var err error
	if kind == "openai" {
		text, err = s.openai(ctx, model, system, user, req)
	} else {
		kind = "ollama"
		text, err = s.ollama(ctx, model, system, user, req)
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("timed out after %v: %w", s.cfg.Timeout, err)
		}
		return "", fmt.Errorf("proxy: summarize with %s (%s): %w", model, kind, err)
	}
	text, _ = rewrite.TrimSummary(text, req.MaxTokens, nil)
	if text == "" {
		return "", fmt.Errorf("proxy: summarize with %s (%s): %w", model, kind, rewrite.ErrEmptySummary)
	}
	s.log.Debug("summary written", "model", model, "backend", kind,
		"duration_ms", time.Since(start).Milliseconds(), "bytes", len(text))
	return text, nil
}

func (s *Summarizer) ollama(ctx context.Context, model, system, user string, req rewrite.SummaryRequest) (string, error) {
	options := map[string]any{"num_predict": req.MaxTokens}
	if req.NumCtx > 0 {
		// The chat's own num_ctx: any other value makes Ollama reload the
		// model, twice per summary (its scheduler compares the runner's
		// options, num_ctx among them: server/sched.go, v0.17.4).
		options["num_ctx"] = req.NumCtx
	}
	stream := false
	body, err := json.Marshal(api.ChatRequest{
		Model:    model,
		Messages: []api.Message{{Role: "system", Content: system}, {Role: "user", Content: user}},
		Stream:   &stream,
		// No thinking: a reasoning model would spend num_predict on it
		// and answer nothing.
		Think:   &api.ThinkValue{Value: false},
		Options: options,
	})
	if err != nil {
		return "", err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, s.backend+"/api/chat", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	hr.Header.Set("Content-Type", "application/json")
	if req.Auth != "" {
		hr.Header.Set("Authorization", req.Auth)
	}
	resp, err := s.client.Do(hr)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, summMaxAnswer))
	if err != nil {
		return "", err
	}
	var out struct {
		api.ChatResponse
		Error string `json:"error"` // Ollama's error shape
	}
	jerr := json.Unmarshal(data, &out)
	if resp.StatusCode != http.StatusOK {
		msg := out.Error
		if jerr != nil || msg == "" {
			msg = string(data)
		}
		return "", fmt.Errorf("backend answered %d: %s", resp.StatusCode, summClip(msg, 200))
	}
	if jerr != nil {
		return "", fmt.Errorf("unreadable answer: %w", jerr)
	}
	return out.Message.Content, nil
}

func (s *Summarizer) openai(ctx context.Context, model, system, user string, req rewrite.SummaryRequest) (string, error) {
	// No token for go-openai, which would send it as "Bearer <token>":
	// the client's header goes as sent, whatever its scheme.
	cfg := openai.DefaultConfig("")
	cfg.BaseURL = s.backend + "/v1"
	cfg.HTTPClient = s.client
	if req.Auth != "" {
		cfg.HTTPClient = &http.Client{
			Transport: summAuth{base: s.client.Transport, auth: req.Auth},
			Timeout:   s.client.Timeout,
		}
	}
	client := openai.NewClientWithConfig(cfg)
	creq := openai.ChatCompletionRequest{
		Model: model,
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: system},
			{Role: openai.ChatMessageRoleUser, Content: user},
		},
		// max_tokens, not max_completion_tokens: Ollama's OpenAI layer (and
		// most OpenAI-compatible servers) read only the older name.
		//lint:ignore SA1019 see above
		MaxTokens: req.MaxTokens,
	}
	resp, err := client.CreateChatCompletion(ctx, creq)
	if errors.Is(err, openai.ErrReasoningModelMaxTokensDeprecated) {
		// o-series and gpt-5 models take max_completion_tokens only.
		//lint:ignore SA1019 clearing the field the model refuses
		creq.MaxTokens, creq.MaxCompletionTokens = 0, req.MaxTokens
		resp, err = client.CreateChatCompletion(ctx, creq)
	}
	if err != nil {
		return "", err
	}
	if len(resp.Choices) == 0 {
		return "", errors.New("answer without choices")
	}
	return resp.Choices[0].Message.Content, nil
}

// summAuth sets the client's Authorization header on the summarizer's
// calls.
type summAuth struct {
	base http.RoundTripper
	auth string
}

func (a summAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", a.auth)
	base := a.base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// summClip shortens a backend's error text for an error message.
func summClip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
