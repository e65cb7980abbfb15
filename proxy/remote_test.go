package proxy

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// TestBackendTokenizer: an OpenAI-compatible backend with a tokenize API
// (vLLM's, llama.cpp's) counts for ctxproxy: the first request's
// X-Ctxproxy-Tokens is the backend's own prompt_tokens, a resent
// conversation costs no tokenize round trip, vLLM's max_model_len is the
// window, and a conversation over it is cut to fit by the backend's count.
func TestBackendTokenizer(t *testing.T) {
	for _, tokenizer := range []string{fakebackend.TokenizeVLLM, fakebackend.TokenizeLlamaCpp} {
		t.Run(tokenizer, func(t *testing.T) {
			be := fakebackend.New(t, fakebackend.OpenAI, fakebackend.Options{TokenizeAPI: tokenizer, ContextLimit: 4096,
				Tokenize: func(s string) int { return len(s)/2 + 1 }})
			sys := newSystem(t, be.URL, setup{})
			body := textConversation("local-model", 10, 1, nil)
			resp := post(t, sys.url+"/v1/chat/completions", body, nil)
			sent := header(resp, "X-Ctxproxy-Tokens")
			if got := promptEvalCount(t, resp); got != sent || got == 0 {
				t.Fatalf("X-Ctxproxy-Tokens %d, usage.prompt_tokens %d", sent, got)
			}
			calls := be.TokenizeCalls()
			resp = post(t, sys.url+"/v1/chat/completions", body, nil)
			io.Copy(io.Discard, resp.Body)
			if n := be.TokenizeCalls(); n != calls {
				t.Errorf("a resent conversation cost %d tokenize calls", n-calls)
			}
			if tokenizer == fakebackend.TokenizeVLLM {
				if lim := header(resp, "X-Ctxproxy-Limit"); lim != 4096-1024 {
					t.Errorf("limit %d: max_model_len 4096 less the reply reserve expected", lim)
				}
			}
			long := textConversation("local-model", 200, 2, nil)
			resp = post(t, sys.url+"/v1/chat/completions", long, nil)
			sent, limit := header(resp, "X-Ctxproxy-Tokens"), header(resp, "X-Ctxproxy-Limit")
			got := promptEvalCount(t, resp)
			if resp.StatusCode != 200 || got != sent || sent > limit || header(resp, "X-Ctxproxy-Dropped") == 0 {
				t.Errorf("long: status %d, sent %d, prompt_tokens %d, limit %d", resp.StatusCode, sent, got, limit)
			}
			if m := scrape(t, sys.url); m[`ctxproxy_prompt_counts_total{method="backend"}`] != 3 {
				t.Errorf("counts by the backend: %v", m[`ctxproxy_prompt_counts_total{method="backend"}`])
			}
			// The tokenize endpoint counts with the backend too.
			var req adminapi.TokenizeRequest
			_ = json.Unmarshal(body, &req)
			tb, _ := json.Marshal(req)
			out := decodeTokenize(t, post(t, sys.url+"/ctxproxy/tokenize", tb, nil))
			if !out.Exact || out.Source != "backend:"+tokenizer {
				t.Errorf("tokenize: %+v", out)
			}
		})
	}
}

// TestNoBackendTokenizer: a backend without one (404 on /tokenize) is
// counted by estimate, and asked once, not on every request.
func TestNoBackendTokenizer(t *testing.T) {
	be := fakebackend.New(t, fakebackend.OpenAI, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{})
	for range 3 {
		resp := post(t, sys.url+"/v1/chat/completions", textConversation("gpt-4o", 4, 1, nil), nil)
		io.Copy(io.Discard, resp.Body)
	}
	if n := requestsTo(be, "/tokenize"); n != 1 {
		t.Errorf("/tokenize asked %d times, want 1", n)
	}
	if m := scrape(t, sys.url); m[`ctxproxy_prompt_counts_total{method="estimate"}`] != 3 {
		t.Errorf("estimates %v", m[`ctxproxy_prompt_counts_total{method="estimate"}`])
	}
}
