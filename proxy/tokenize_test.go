package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

func decodeTokenize(t *testing.T, resp *http.Response) adminapi.TokenizeResponse {
	t.Helper()
	body := readAll(t, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var out adminapi.TokenizeResponse
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
	body, _ := json.Marshal(adminapi.TokenizeRequest{Model: "tiny", Content: &text})
	out := decodeTokenize(t, post(t, sys.url+"/ctxproxy/tokenize", body, nil))
	if !out.Exact || out.Count != len(out.Tokens) || out.Count == 0 || !strings.HasSuffix(out.Source, ":gpt2/llama-bpe") {
		t.Fatalf("text: %+v", out)
	}
	back, _ := json.Marshal(adminapi.DetokenizeRequest{Model: "tiny", Tokens: out.Tokens})
	resp := post(t, sys.url+"/ctxproxy/detokenize", back, nil)
	var d adminapi.DetokenizeResponse
	if err := json.Unmarshal([]byte(readAll(t, resp.Body)), &d); err != nil || d.Content != text {
		t.Fatalf("detokenize: %v %q", err, d.Content)
	}

	chat := textConversation("tiny", 12, 3, nil)
	var req adminapi.TokenizeRequest
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
	body, _ := json.Marshal(adminapi.TokenizeRequest{Model: "gpt-4o", Content: &text})
	out := decodeTokenize(t, post(t, sys.url+"/ctxproxy/tokenize", body, nil))
	if out.Exact || out.Tokens != nil || out.Count == 0 || out.Source != "estimate:o200k_base" {
		t.Errorf("%+v", out)
	}
	back, _ := json.Marshal(adminapi.DetokenizeRequest{Model: "gpt-4o", Tokens: []int32{1, 2}})
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

// TestRawPromptCounted: /api/generate prompts are not cut, but counted
// exactly (raw and templated), forwarded byte for byte, and one longer
// than the window is announced, and its silent truncation detected.
func TestRawPromptCounted(t *testing.T) {
	m, pre := bpeModel()
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Model: m, Pretokenizer: pre})
	sys := newSystem(t, be.URL, setup{})
	for _, raw := range []bool{false, true} {
		prompt, _ := json.Marshal(vocabgen.Text(600, 4))
		body := []byte(`{"model":"tiny","stream":false,"system":"Be brief.","raw":` + strconv.FormatBool(raw) + `,"prompt":` + string(prompt) + `}`)
		resp := post(t, sys.url+"/api/generate", body, nil)
		sent := header(resp, "X-Ctxproxy-Tokens")
		if got := promptEvalCount(t, resp); got != sent || got == 0 {
			t.Errorf("raw %v: X-Ctxproxy-Tokens %d, prompt_eval_count %d", raw, sent, got)
		}
		if fwd, _ := be.Last("/api/generate"); string(fwd.Body) != string(body) {
			t.Errorf("raw %v: body changed: %s", raw, fwd.Body)
		}
	}
	long, _ := json.Marshal(vocabgen.Text(40000, 5))
	resp := post(t, sys.url+"/api/generate", []byte(`{"model":"tiny","stream":false,"prompt":`+string(long)+`}`), nil)
	io.Copy(io.Discard, resp.Body)
	if w := strings.Join(resp.Header.Values("X-Ctxproxy-Warning"), " | "); !strings.Contains(w, "longer than the model's window (4096)") {
		t.Errorf("no overflow warning: %q", w)
	}
	m2 := scrape(t, sys.url)
	if m2["ctxproxy_raw_prompt_overflows_total"] != 1 || m2["ctxproxy_backend_truncations_total"] != 1 {
		t.Errorf("overflows %v, truncations %v", m2["ctxproxy_raw_prompt_overflows_total"], m2["ctxproxy_backend_truncations_total"])
	}
	if a := sys.srv.be.Model(t.Context(), "tiny").Agreement(); a.Off {
		t.Errorf("a truncated (censored) report turned exact counting off: %+v", a)
	}
}
