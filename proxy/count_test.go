package proxy

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// TestForwardedUncounted: a model's first request, while its vocabulary
// is still on its way (the fake holds the verbose /api/show), reaches the
// backend at once when its bytes prove it fits; its answer waits for the
// count, and its headers are exact (X-Ctxproxy-Tokens equals the
// backend's prompt_eval_count) on both chat routes. A conversation whose
// bytes do not prove it fits waits for the vocabulary and is cut by the
// exact count.
func TestForwardedUncounted(t *testing.T) {
	for _, route := range []string{"/api/chat", "/v1/chat/completions"} {
		t.Run(route, func(t *testing.T) {
			m, pre := bpeModel()
			hold := make(chan struct{})
			be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Model: m, Pretokenizer: pre, HoldVerbose: hold})
			sys := newSystem(t, be.URL, setup{})
			body := textConversation("tiny", 6, 1, map[string]any{"options": map[string]any{"num_ctx": 8192}})
			answered := postAsync(sys.url+route, body)
			if !within(5*time.Second, func() bool { _, ok := be.Last("/api/chat"); return ok }) {
				t.Fatal("the request waited for the vocabulary")
			}
			select {
			case <-answered:
				t.Fatal("answered before it was counted")
			case <-time.After(100 * time.Millisecond):
			}
			close(hold)
			resp := <-answered
			if resp == nil {
				t.Fatal("no answer")
			}
			sent, got := header(resp, "X-Ctxproxy-Tokens"), promptEvalCount(t, resp)
			if sent != got || got == 0 || resp.Header.Get("X-Ctxproxy-Budget") == "" {
				t.Errorf("X-Ctxproxy-Tokens %d, prompt_eval_count %d, budget %q", sent, got, resp.Header.Get("X-Ctxproxy-Budget"))
			}
		})
	}

	t.Run("over", func(t *testing.T) {
		m, pre := bpeModel()
		hold := make(chan struct{})
		be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Model: m, Pretokenizer: pre, HoldVerbose: hold})
		sys := newSystem(t, be.URL, setup{})
		body := textConversation("tiny", 60, 2, map[string]any{"options": map[string]any{"num_ctx": 2048}})
		answered := postAsync(sys.url+"/api/chat", body)
		time.Sleep(200 * time.Millisecond)
		if _, ok := be.Last("/api/chat"); ok {
			t.Fatal("a conversation over the window went before it was counted")
		}
		close(hold)
		resp := <-answered
		if resp == nil {
			t.Fatal("no answer")
		}
		limit, sent, got := header(resp, "X-Ctxproxy-Limit"), header(resp, "X-Ctxproxy-Tokens"), promptEvalCount(t, resp)
		if sent != got || got > limit || header(resp, "X-Ctxproxy-Dropped") == 0 {
			t.Errorf("X-Ctxproxy-Tokens %d, prompt_eval_count %d, limit %d, dropped %d", sent, got, limit, header(resp, "X-Ctxproxy-Dropped"))
		}
	})
}

// postAsync posts body to url and delivers the response (nil on a
// transport error).
func postAsync(url string, body []byte) <-chan *http.Response {
	out := make(chan *http.Response, 1)
	go func() {
		resp, err := http.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			out <- nil
			return
		}
		out <- resp
	}()
	return out
}

// within polls cond until it holds or d has passed.
func within(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}
