package proxy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/internal/fakebackend"
	"github.com/ctxproxy/ctxproxy/internal/vocabgen"
)

func decodeTokenize(t *testing.T, resp *http.Response) TokenizeResponse {
	t.Helper()
	body := readAll(t, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var out TokenizeResponse
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTokenizeEndpoint: /ctxproxy/tokenize counts text and chat
// requests with the model's own tokenizer (tokens included, and a chat's
// count equal to what the backend evaluates), and by estimate for a
// backend without one; /ctxproxy/detokenize inverts it.
func TestTokenizeEndpoint(t *testing.T) {
	m, pre := bpeModel()
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Model: m, Pretokenizer: pre, DefaultNumCtx: 1 << 20})
	sys := newSystem(t, be.URL, setup{})

	text := vocabgen.Text(400, 9)
	body, _ := json.Marshal(TokenizeRequest{Model: "tiny", Content: &text})
	out := decodeTokenize(t, post(t, sys.url+"/ctxproxy/tokenize", body, nil))
	if !out.Exact || out.Count != len(out.Tokens) || out.Count == 0 || !strings.HasPrefix(out.Source, "ollama:gpt2/llama-bpe") {
		t.Fatalf("text: %+v", out)
	}
	back, _ := json.Marshal(DetokenizeRequest{Model: "tiny", Tokens: out.Tokens})
	resp := post(t, sys.url+"/ctxproxy/detokenize", back, nil)
	var d DetokenizeResponse
	if err := json.Unmarshal([]byte(readAll(t, resp.Body)), &d); err != nil || d.Content != text {
		t.Fatalf("detokenize: %v %q", err, d.Content)
	}

	chat := textConversation("tiny", 12, 3, nil)
	var req TokenizeRequest
	_ = json.Unmarshal(chat, &req)
	body, _ = json.Marshal(req)
	out = decodeTokenize(t, post(t, sys.url+"/ctxproxy/tokenize", body, nil))
	r := post(t, sys.url+"/api/chat", chat, nil)
	if got := promptEvalCount(t, r); !out.Exact || out.Count != got || len(out.Messages) != 14 {
		t.Fatalf("chat: count %d (exact %v, %d messages), backend evaluated %d", out.Count, out.Exact, len(out.Messages), got)
	}
	sum := 0
	for _, mc := range out.Messages {
		sum += mc.Tokens
	}
	if sum >= out.Count || sum < out.Count*9/10 {
		t.Errorf("message shares add to %d of %d", sum, out.Count)
	}

	// Ollama's own route, which Ollama does not serve: ctxproxy answers.
	out = decodeTokenize(t, post(t, sys.url+"/api/tokenize", body, nil))
	if !out.Exact || out.Count == 0 {
		t.Errorf("/api/tokenize: %+v", out)
	}

	for _, bad := range []string{`{}`, `{"model":"tiny"}`, `{"model":"tiny","content":"x","messages":[]}`, `not json`} {
		if resp := post(t, sys.url+"/ctxproxy/tokenize", []byte(bad), nil); resp.StatusCode != 400 {
			t.Errorf("%s: status %d", bad, resp.StatusCode)
		}
	}
}

// TestTokenizeEstimate: without a tokenizer (an OpenAI backend) the count
// is an estimate, said so, and carries no tokens; detokenize is refused.
func TestTokenizeEstimate(t *testing.T) {
	be := fakebackend.New(t, fakebackend.OpenAI, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{})
	text := "hello there, general kenobi"
	body, _ := json.Marshal(TokenizeRequest{Model: "gpt-4o", Content: &text})
	out := decodeTokenize(t, post(t, sys.url+"/ctxproxy/tokenize", body, nil))
	if out.Exact || out.Tokens != nil || out.Count == 0 || out.Source != "estimate:o200k_base" {
		t.Errorf("%+v", out)
	}
	back, _ := json.Marshal(DetokenizeRequest{Model: "gpt-4o", Tokens: []int32{1, 2}})
	if resp := post(t, sys.url+"/ctxproxy/detokenize", back, nil); resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("detokenize without a tokenizer: %d", resp.StatusCode)
	}
}

// TestAPITokenizePassedThrough: a backend that serves /api/tokenize
// itself answers it; ctxproxy does not step in.
func TestAPITokenizePassedThrough(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/version":
			_, _ = w.Write([]byte(`{"version":"9.9.9"}`))
		case "/api/tokenize":
			_, _ = w.Write([]byte(`{"tokens":[1,2,3],"from":"backend"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(backend.Close)
	_, px := newProxy(t, backend.URL, Config{})
	resp := post(t, px.URL+"/api/tokenize", []byte(`{"model":"m","content":"abc"}`), nil)
	if got := readAll(t, resp.Body); resp.StatusCode != 200 || got != `{"tokens":[1,2,3],"from":"backend"}` {
		t.Errorf("%d %s", resp.StatusCode, got)
	}
}
