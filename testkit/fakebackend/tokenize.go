package fakebackend

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Tokenize endpoints of OpenAI-compatible servers, as their
// documentation gives the shapes:
//
//   - vLLM (docs: "Tokenizer API", vllm/entrypoints/openai/protocol.py,
//     v0.6–v0.11): POST /tokenize with {"model", "prompt"} or {"model",
//     "messages", "tools", "add_generation_prompt"} answers {"count",
//     "max_model_len", "tokens"}; POST /detokenize {"model", "tokens"}
//     answers {"prompt"}.
//   - llama.cpp's server (tools/server/README.md, b4000 and later): POST
//     /tokenize {"content", "add_special", "parse_special", "with_pieces"}
//     answers {"tokens"}; POST /apply-template {"messages"} answers
//     {"prompt"} (the chat template applied, generation prompt included);
//     POST /detokenize {"tokens"} answers {"content"}.
const (
	TokenizeVLLM     = "vllm"
	TokenizeLlamaCpp = "llama.cpp"
)

// tokens is a fake token list of n ids.
func tokens(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 100 + i
	}
	return out
}

// llamaCppTemplate renders messages as the llama.cpp fake's chat
// template.
func llamaCppTemplate(c chatBody) string {
	var b strings.Builder
	for _, m := range c.Messages {
		var s string
		if json.Unmarshal(m.Content, &s) != nil {
			s = string(m.Content)
		}
		b.WriteString("<|" + m.Role + "|>" + s + "\n")
	}
	b.WriteString("<|assistant|>")
	return b.String()
}

// serveTokenize answers the tokenize routes of o.TokenizeAPI; false when
// the path is not one of them.
func (b *Fake) serveTokenize(w http.ResponseWriter, r *http.Request, body []byte, o Options) bool {
	if o.TokenizeAPI == "" || r.Method != http.MethodPost {
		return false
	}
	switch r.URL.Path {
	case "/tokenize", "/apply-template":
		b.mu.Lock()
		b.tokenizeCalls++
		b.mu.Unlock()
	}
	switch {
	case o.TokenizeAPI == TokenizeVLLM && r.URL.Path == "/tokenize":
		var req struct {
			Prompt *string `json:"prompt"`
			chatBody
		}
		if err := json.Unmarshal(body, &req); err != nil {
			writeJSON(w, 400, openaiError("invalid body", "BadRequestError", ""))
			return true
		}
		n := 0
		if req.Prompt != nil {
			n = o.Tokenize(*req.Prompt)
		} else {
			n = promptTokens(req.chatBody, o.Tokenize)
		}
		writeJSON(w, 200, map[string]any{"count": n, "max_model_len": o.ContextLimit, "tokens": tokens(n)})
	case o.TokenizeAPI == TokenizeLlamaCpp && r.URL.Path == "/tokenize":
		var req struct {
			Content string `json:"content"`
		}
		_ = json.Unmarshal(body, &req)
		writeJSON(w, 200, map[string]any{"tokens": tokens(o.Tokenize(req.Content))})
	case o.TokenizeAPI == TokenizeLlamaCpp && r.URL.Path == "/apply-template":
		var c chatBody
		if err := json.Unmarshal(body, &c); err != nil {
			writeJSON(w, 400, map[string]any{"error": map[string]any{"code": 400, "message": "invalid body", "type": "invalid_request_error"}})
			return true
		}
		writeJSON(w, 200, map[string]any{"prompt": llamaCppTemplate(c)})
	default:
		return false
	}
	return true
}

// TokenizeCalls is how many tokenize requests the fake answered.
func (b *Fake) TokenizeCalls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokenizeCalls
}
