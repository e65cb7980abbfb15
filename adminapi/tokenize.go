package adminapi

import "encoding/json"

// TokenizeRequest is the body of POST /ctxproxy/tokenize and of the
// /api/tokenize ctxproxy answers for Ollama: a text (Content), or a chat
// request's messages, tools and think value, counted as the model's
// server would build its prompt.
type TokenizeRequest struct {
	Model    string          `json:"model"`
	Content  *string         `json:"content,omitempty"`
	Messages json.RawMessage `json:"messages,omitempty"`
	Tools    json.RawMessage `json:"tools,omitempty"`
	Think    json.RawMessage `json:"think,omitempty"`
}

// TokenizeResponse is what ctxproxy counted. Tokens are given only when
// the count is exact (the model's own tokenizer).
type TokenizeResponse struct {
	Model  string  `json:"model"`
	Tokens []int32 `json:"tokens,omitempty"`
	Count  int     `json:"count"`
	// Exact is true when the count came from the model's own tokenizer
	// and template, false for an estimate (tiktoken and calibration).
	Exact bool `json:"exact"`
	// Source names the counter: "ollama:gpt2/llama-bpe",
	// "estimate:cl100k_base".
	Source string `json:"source"`
	// Messages are each message's share of a chat prompt's count.
	Messages []MessageCount `json:"messages,omitempty"`
}

// MessageCount is one message's share of a prompt.
type MessageCount struct {
	Role   string `json:"role"`
	Tokens int    `json:"tokens"`
}

// DetokenizeRequest and DetokenizeResponse are the bodies of POST
// /ctxproxy/detokenize (and /api/detokenize for Ollama).
type DetokenizeRequest struct {
	Model  string  `json:"model"`
	Tokens []int32 `json:"tokens"`
}

type DetokenizeResponse struct {
	Model   string `json:"model"`
	Content string `json:"content"`
	Source  string `json:"source"`
}
