package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/ctxproxy/ctxproxy/proxy/wire"
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
		return overflow{}, strings.Contains(msg, "exceeds the context length")
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

// retryOverflow handles a backend's refusal of an overlong prompt before
// the client has seen anything: it cuts the conversation harder (by the
// excess the error reports plus a margin, else to 90%, 70% and 40% of the
// window)
// and sends it again, up to maxOverflowRetries times. It returns the
// response to give the client: a success, another error as the backend
// sent it, or a clear error of ctxproxy's own. resp's body is consumed
// only when it was an overflow.
func (s *Server) retryOverflow(resp *http.Response, ex *exchange) (next *http.Response, own bool) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return resp, false
	}
	o, ok := parseOverflow(resp.StatusCode, body)
	if !ok {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
		return resp, false
	}
	resp.Body.Close()
	p := ex.plan
	shrink := 0
	for attempt := 1; attempt <= maxOverflowRetries; attempt++ {
		if o.excess > 0 {
			shrink += o.excess + max(16, p.limit/50)
		} else {
			// Ollama does not say by how much: leave 90%, 70%, then 40%
			// of the window, enough for an estimate off by a factor of two.
			shrink = p.limit - p.limit*[]int{90, 70, 40}[attempt-1]/100
		}
		out, aerr := ex.recut(shrink)
		if aerr != nil {
			return errorResponse(resp, ex.dialect, *aerr), true
		}
		p.retries = attempt
		s.metrics.overflowRetries.Inc()
		s.log.Info("the backend refused the prompt as too long; cut harder and sent again",
			"model", p.model, "session", ex.session, "attempt", attempt, "sent", p.after.Tokens, "limit", p.limit-shrink)
		next, err := s.resend(resp.Request, out)
		if err != nil {
			return errorResponse(resp, ex.dialect, wire.Error{Status: http.StatusBadGateway,
				Message: fmt.Sprintf("ctxproxy could not reach the backend at %s to resend a cut prompt", s.backend.Redacted())}), true
		}
		if next.StatusCode == http.StatusOK {
			ex.warn(fmt.Sprintf("the backend refused the prompt as longer than its window; ctxproxy cut it by %d tokens more and retried (%d)", shrink, attempt))
			p.allocate()
			setPlanHeaders(ex, p)
			return next, false
		}
		body, err = io.ReadAll(io.LimitReader(next.Body, 64<<10))
		next.Body.Close()
		if err != nil {
			break
		}
		if o, ok = parseOverflow(next.StatusCode, body); !ok {
			next.Body = io.NopCloser(bytes.NewReader(body))
			next.ContentLength = int64(len(body))
			next.Header.Set("Content-Length", strconv.Itoa(len(body)))
			return next, false
		}
	}
	s.metrics.overflowFailures.Inc()
	return errorResponse(resp, ex.dialect, wire.Error{Status: http.StatusBadRequest, Code: "context_length_exceeded",
		Message: fmt.Sprintf("the backend refused the prompt as longer than its context window %d times; ctxproxy counted %d tokens "+
			"for a limit of %d and cut it by up to %d tokens more without success (the model's window may be smaller than configured: "+
			"see models: in the config)", maxOverflowRetries+1, p.before.Tokens, p.limit, shrink)}), true
}

// resend sends body to the backend in place of the original request's.
func (s *Server) resend(orig *http.Request, body wire.Payload) (*http.Response, error) {
	out := orig.Clone(orig.Context())
	n := body.Size()
	out.Body = io.NopCloser(body.Reader())
	out.ContentLength = int64(n)
	out.Header.Set("Content-Length", strconv.Itoa(n))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(body.Reader()), nil }
	return s.rp.Transport.RoundTrip(out)
}

// errorResponse is a response of ctxproxy's own carrying e in the
// dialect's error shape, in place of the backend's resp.
func errorResponse(resp *http.Response, d wire.Dialect, e wire.Error) *http.Response {
	body := wire.ErrorBody(d, e)
	h := http.Header{}
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return &http.Response{Status: fmt.Sprintf("%d %s", e.Status, http.StatusText(e.Status)), StatusCode: e.Status,
		Proto: resp.Proto, ProtoMajor: resp.ProtoMajor, ProtoMinor: resp.ProtoMinor, Header: h,
		Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: resp.Request}
}
