package proxy

import (
	"io"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

func TestParseOverflow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		ok     bool
		excess int
	}{
		{"ollama", 400, `{"error":"the input length exceeds the context length"}`, true, 0},
		{"openai", 400, `{"error":{"message":"This model's maximum context length is 8192 tokens. However, you requested 9000 tokens (8000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, true, 808},
		{"vllm", 400, `{"object":"error","error":{"message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4500 in the messages, 500 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","code":400}}`, true, 904},
		{"openai resulted", 400, `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, true, 2000},
		{"openai code only", 400, `{"error":{"message":"too long","type":"invalid_request_error","code":"context_length_exceeded"}}`, true, 0},
		{"llama.cpp", 400, `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`, true, 904},
		// Ollama 0.34.3, measured: llama-server's error inside Ollama's
		// string ("truncate": false), and the wording with context shift off.
		{"ollama 0.34 llama-server", 400, `{"error":"{\"error\":{\"code\":400,\"message\":\"request (15019 tokens) exceeds the available context size (512 tokens), try increasing it\",\"type\":\"exceed_context_size_error\",\"n_prompt_tokens\":15019,\"n_ctx\":512}}"}`, true, 14507},
		{"ollama 0.34 no shift", 400, `{"error":"the prompt is longer than the context length currently available to the model; shorten the prompt, adjust the context length in settings, or use a model with a longer context length"}`, true, 0},
		{"ollama 0.34 another llama-server error", 400, `{"error":"{\"error\":{\"code\":400,\"message\":\"invalid grammar\",\"type\":\"invalid_request_error\"}}"}`, false, 0},
		{"other 400", 400, `{"error":"model 'x' not found"}`, false, 0},
		{"openai other", 400, `{"error":{"message":"invalid temperature","type":"invalid_request_error","code":null}}`, false, 0},
		{"not json", 400, `Bad Request`, false, 0},
		{"500", 500, `{"error":"the input length exceeds the context length"}`, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, ok := parseOverflow(tc.status, []byte(tc.body))
			if ok != tc.ok || o.excess != tc.excess {
				t.Errorf("parseOverflow = %+v, %v; want excess %d, %v", o, ok, tc.excess, tc.ok)
			}
		})
	}
}

// undercounting is a backend whose tokenizer counts 4 times what
// ctxproxy's estimate (bytes/4, no calibration) says, and refuses
// overlong prompts as Ollama does with truncate false.
func undercounting(t *testing.T) (*fakebackend.Fake, *system) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Tokenize: func(s string) int { return len(s) + 1 }})
	off := false
	sys := newSystem(t, be.URL, setup{gpu: gpuOff(),
		tokens: budget.Config{Encoding: tokenizer.EncodingApproximate, Calibrate: &off}})
	return be, sys
}

// TestOverflowRetry: the backend refuses a prompt ctxproxy's count said
// would fit; ctxproxy cuts harder and resends before the client sees a
// byte, for streamed and plain requests, and counts it.
func TestOverflowRetry(t *testing.T) {
	for _, stream := range []bool{false, true} {
		be, sys := undercounting(t)
		body := textConversation("m", 60, 7, map[string]any{"options": map[string]any{"num_ctx": 2048}, "stream": stream})
		resp := post(t, sys.url+"/api/chat", body, map[string]string{"X-Session-ID": "overflow"})
		got := readAll(t, resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(got, `"done":true`) {
			t.Fatalf("stream %v: status %d: %s", stream, resp.StatusCode, got)
		}
		if w := strings.Join(resp.Header.Values("X-Ctxproxy-Warning"), " | "); !strings.Contains(w, "retried") {
			t.Errorf("no word of the retry: %q", w)
		}
		if refused := requestsTo(be, "/api/chat"); refused < 2 {
			t.Errorf("the backend saw %d chat requests; want the refused one and a retry", refused)
		}
		m := scrape(t, sys.url)
		if m["ctxproxy_overflow_retries_total"] < 1 || m["ctxproxy_overflow_failures_total"] != 0 {
			t.Errorf("retries %v, failures %v", m["ctxproxy_overflow_retries_total"], m["ctxproxy_overflow_failures_total"])
		}
		sys.flush(t)
		sess, err := sys.store.Get(t.Context(), "overflow")
		if err != nil || sess.Stats.OverflowRetries < 1 {
			t.Errorf("session stats: %+v, %v", sess.Stats, err)
		}
	}
}

// TestOverflowGivesUp: a backend that refuses every prompt gets a clear
// context_length_exceeded error to the client, in its dialect, after the
// retries.
func TestOverflowGivesUp(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Status: 400, ErrorMessage: "the input length exceeds the context length"})
	sys := newSystem(t, be.URL, setup{gpu: gpuOff(), strategy: rewrite.Config{}})
	for _, route := range []string{"/api/chat", "/v1/chat/completions"} {
		resp := post(t, sys.url+route, textConversation("m", 30, 1, nil), nil)
		got := readAll(t, resp.Body)
		if resp.StatusCode != 400 || !strings.Contains(got, "refused the prompt as longer than its context window") {
			t.Errorf("%s: %d %s", route, resp.StatusCode, got)
		}
		if route == "/v1/chat/completions" && !strings.Contains(got, `"code":"context_length_exceeded"`) {
			t.Errorf("%s: not in OpenAI's shape: %s", route, got)
		}
	}
	if m := scrape(t, sys.url); m["ctxproxy_overflow_failures_total"] != 2 {
		t.Errorf("failures %v, want 2", m["ctxproxy_overflow_failures_total"])
	}
	_ = io.Discard
}

// TestOtherErrorsPassThrough: a 400 that is not an overflow reaches the
// client as the backend sent it, and nothing is retried.
func TestOtherErrorsPassThrough(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Status: 400, ErrorMessage: "model 'm' not found"})
	sys := newSystem(t, be.URL, setup{gpu: gpuOff()})
	resp := post(t, sys.url+"/api/chat", textConversation("m", 4, 1, nil), nil)
	if got := readAll(t, resp.Body); resp.StatusCode != 400 || strings.TrimSpace(got) != `{"error":"model 'm' not found"}` {
		t.Errorf("%d %s", resp.StatusCode, got)
	}
	if n := requestsTo(be, "/api/chat"); n != 1 {
		t.Errorf("%d chat requests reached the backend, want 1", n)
	}
}

// requestsTo is how many requests the fake backend got on path.
func requestsTo(be *fakebackend.Fake, path string) int {
	n := 0
	for _, r := range be.Requests() {
		if r.Path == path {
			n++
		}
	}
	return n
}
