package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// maxOverflowRetries is how many times ctxproxy cuts harder and resends a
// request the backend refused as too long, before telling the client.
const maxOverflowRetries = 3

// overflow is what a backend's refusal of an overlong prompt says.
type overflow struct {
	// excess is the tokens over the window when the error says so
	// (OpenAI, vLLM, llama.cpp); 0 when it does not (Ollama).
	excess int
}

// Overflow errors, as each backend words them:
//   - Ollama (runner, with "truncate": false): 400 {"error": "the input
//     length exceeds the context length"} (runner/ollamarunner, v0.17.4);
//   - Ollama 0.30 and later, which runs llama.cpp's llama-server: with
//     "truncate": false, llama-server's own error passed on as the error
//     string ({"error": "{\"error\":{…\"type\":\"exceed_context_size_error\",
//     \"n_prompt_tokens\":P,\"n_ctx\":N}}"}); with context shift off,
//     400 {"error": "the prompt is longer than the context length
//     currently available to the model; …"} (llm/llama_server.go, v0.34.3);
//   - OpenAI and vLLM: 400 with code "context_length_exceeded" or the
//     message "This model's maximum context length is N tokens. However,
//     you requested M tokens (P in the messages, C in the completion)";
//   - llama.cpp's server: 400 {"error": {"type": "exceed_context_size_error",
//     "n_prompt_tokens": P, "n_ctx": N, …}} (tools/server, b6000 and later).
var (
	reMaxContext = regexp.MustCompile(`maximum context length is (\d+) tokens`)
	reRequested  = regexp.MustCompile(`(?:you requested|your messages resulted in) (\d+) tokens`)
	reInMessages = regexp.MustCompile(`\((\d+) in the messages`)
)

// parseOverflow reports whether body is a backend's refusal of a prompt
// longer than its window.
func parseOverflow(status int, body []byte) (overflow, bool) {
	if status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge {
		return overflow{}, false
	}
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Error) == 0 {
		return overflow{}, false
	}
	var msg string
	if json.Unmarshal(e.Error, &msg) == nil {
		switch {
		case strings.Contains(msg, "exceeds the context length"), strings.Contains(msg, "longer than the context length"):
			return overflow{}, true
		case strings.HasPrefix(msg, `{"error"`) && strings.Contains(msg, "context"):
			// llama-server's error, passed on by Ollama as a string.
			return parseOverflow(status, []byte(msg))
		}
		return overflow{}, false
	}
	var oe struct {
		Message  string `json:"message"`
		Code     any    `json:"code"`
		Type     string `json:"type"`
		NPrompt  int    `json:"n_prompt_tokens"`
		NCtx     int    `json:"n_ctx"`
		NPredict int    `json:"n_predict"`
	}
	if json.Unmarshal(e.Error, &oe) != nil {
		return overflow{}, false
	}
	switch {
	case oe.Type == "exceed_context_size_error":
		return overflow{excess: max(0, oe.NPrompt-oe.NCtx)}, true
	case oe.Code == "context_length_exceeded", reMaxContext.MatchString(oe.Message):
		o := overflow{}
		if m := reMaxContext.FindStringSubmatch(oe.Message); m != nil {
			window, _ := strconv.Atoi(m[1])
			if r := reRequested.FindStringSubmatch(oe.Message); r != nil {
				asked, _ := strconv.Atoi(r[1])
				o.excess = max(0, asked-window)
			} else if r := reInMessages.FindStringSubmatch(oe.Message); r != nil {
				asked, _ := strconv.Atoi(r[1])
				o.excess = max(0, asked-window)
			}
		}
		return o, true
	}
	return overflow{}, false
}

// overflowOf reports whether resp is the backend's refusal of a prompt
// longer than its window, and returns resp to pass on when it is not: an
// error answer's body (up to 64 KB) is read to know, and given back whole.
func overflowOf(resp *http.Response) (overflow, bool, *http.Response) {
	if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusRequestEntityTooLarge {
		return overflow{}, false, resp
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
		return overflow{}, false, resp
	}
	o, ok := parseOverflow(resp.StatusCode, body)
	if ok {
		resp.Body.Close()
		return o, true, nil
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
	return overflow{}, false, resp
}

// errReader fails every read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// shrink is how many tokens below the window the next resend is cut to,
// after attempt refusals and prev tokens already: the excess the error
// reported and a margin, else (Ollama does not say by how much) 10%, 30%
// and 60% of the window, enough for an estimate off by a factor of two.
func (o overflow) shrink(limit, attempt, prev int) int {
	if o.excess > 0 {
		return prev + o.excess + max(16, limit/50)
	}
	return limit - limit*[]int{90, 70, 40}[attempt]/100
}
