package proxy

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/modelinfo"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// What the Ollama of today (0.30 and later, llama-server) brings to a
// proxy in front of it.

// TestCloudModelPassedThrough: a model Ollama answers from its cloud is
// forwarded as sent, to the route the client named, with a notice: never
// counted with a local tokenizer, translated, or given a num_ctx.
func TestCloudModelPassedThrough(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{})
	for _, c := range []struct{ path, body string }{
		{"/api/chat", `{"model":"gpt-oss:120b-cloud","stream":false,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/chat/completions", `{"model":"kimi-k2:cloud","messages":[{"role":"user","content":"hi"}]}`},
	} {
		resp := post(t, sys.url+c.path, []byte(c.body), nil)
		readAll(t, resp.Body)
		got, ok := be.Last(c.path)
		if resp.StatusCode != 200 || !ok || string(got.Body) != c.body {
			t.Errorf("%s: status %d, forwarded %v %s", c.path, resp.StatusCode, ok, got.Body)
		}
		if n := resp.Header.Get("X-Ctxproxy-Tokens"); n != "" || resp.Header.Get("X-Ctxproxy-Num-Ctx") != "" ||
			!strings.Contains(resp.Header.Get("X-Ctxproxy-Notice"), "Ollama's cloud") {
			t.Errorf("%s: counted %q, notice %q", c.path, n, resp.Header.Get("X-Ctxproxy-Notice"))
		}
	}
	if _, ok := be.Last("/api/show"); ok {
		t.Error("ctxproxy asked the backend for a cloud model's details")
	}
}

// TestResponsesCompactionLeftToOllama: a Responses request that holds
// Ollama's own compaction items (Codex's remote compaction) goes to
// Ollama's own /v1/responses as sent, with a notice; an ordinary one is
// translated and managed, so Ollama's compaction and ctxproxy's cuts
// never act on one request.
func TestResponsesCompactionLeftToOllama(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{})
	for _, item := range []string{
		`{"type":"compaction","encrypted_content":"opaque"}`,
		`{"type":"compaction_trigger"}`,
	} {
		body := `{"model":"llama3.1:8b","stream":true,"input":[{"role":"user","content":"hi"},` + item + `]}`
		resp := post(t, sys.url+"/v1/responses", []byte(body), nil)
		readAll(t, resp.Body)
		got, ok := be.Last("/v1/responses")
		if !ok || string(got.Body) != body || !strings.Contains(resp.Header.Get("X-Ctxproxy-Notice"), "Ollama's own compaction") {
			t.Errorf("%s: forwarded to /v1/responses %v, notice %q", item, ok, resp.Header.Get("X-Ctxproxy-Notice"))
		}
	}
	n := len(be.Requests())
	resp := post(t, sys.url+"/v1/responses", []byte(`{"model":"llama3.1:8b","input":"hi"}`), nil)
	readAll(t, resp.Body)
	// (The model's tokenizer may still be read in the background.)
	if got := be.Requests(); len(got) <= n || !slices.ContainsFunc(got[n:], func(r fakebackend.Request) bool { return r.Path == "/api/chat" }) {
		t.Error("an ordinary Responses request was not translated")
	}
}

// TestLoadFailureSaid: a model the backend's runner cannot load fails
// with the runner's words; the answer passes as it came, and ctxproxy
// says which model and why.
func TestLoadFailureSaid(t *testing.T) {
	msg := "llama-server process has terminated: exit status 1: error loading model: check_tensor_dims: tensor 'blk.0.attn_output.weight' not found\nmore"
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Status: 500, ErrorMessage: msg})
	sys := newSystem(t, be.URL, setup{})
	resp := post(t, sys.url+"/api/chat", []byte(`{"model":"llama3.1:8b","messages":[{"role":"user","content":"hi"}]}`), nil)
	body := readAll(t, resp.Body)
	if resp.StatusCode != 500 || !strings.Contains(body, "check_tensor_dims") {
		t.Errorf("status %d: %s", resp.StatusCode, body)
	}
	w := strings.Join(resp.Header.Values("X-Ctxproxy-Warning"), " | ")
	if !strings.Contains(w, `could not load "llama3.1:8b"`) || !strings.Contains(w, "tensor 'blk.0.attn_output.weight' not found") || strings.Contains(w, "more") {
		t.Errorf("warning %q", w)
	}
}

// TestBackendInfo: the backend's kind and version are a metric, and a
// version newer than any ctxproxy's rules know is marked.
func TestBackendInfo(t *testing.T) {
	for version, newer := range map[string]string{"0.34.3": "false", "0.40.1": "true"} {
		fake := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/api/version" {
				w.Write([]byte(`{"version":"` + version + `"}`))
				return
			}
			fake.ServeHTTP(w, r)
		}))
		t.Cleanup(front.Close)
		sys := newSystem(t, front.URL, setup{})
		resp := post(t, sys.url+"/api/chat", textConversation("llama3.1:8b", 2, 1, nil), nil)
		readAll(t, resp.Body)
		want := `ctxproxy_backend_info{kind="ollama",newer_than_checked="` + newer + `",version="` + version + `"} 1`
		if m := metricsText(t, sys.url); !strings.Contains(m, want) {
			t.Errorf("no %s in the metrics", want)
		}
	}
}

// TestNewRoutesPassThrough: the routes newer Ollama versions added
// (Responses compaction, audio transcription, model aliases) reach the
// backend as sent.
func TestNewRoutesPassThrough(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{})
	for _, path := range []string{"/v1/responses/compact", "/v1/audio/transcriptions", "/api/experimental/aliases"} {
		body := `{"model":"llama3.1:8b","input":[{"role":"user","content":"hi"}]}`
		resp := post(t, sys.url+path, []byte(body), nil)
		readAll(t, resp.Body)
		if got, ok := be.Last(path); !ok || string(got.Body) != body {
			t.Errorf("%s did not reach the backend as sent", path)
		}
	}
}

// TestWindowOllamaChose: when ctxproxy sets no num_ctx and the model's
// Modelfile sets none, the window is the one the backend runs the model
// with now (/api/ps; from 0.30 Ollama chooses it by its free memory).
func TestWindowOllamaChose(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	off := false
	sys := newSystem(t, be.URL, setup{gpu: gpu.Config{AutoSize: &off},
		loaded: []modelinfo.Loaded{{Name: "llama3.1:8b", Size: 6 << 30, NumCtx: 32768}}})
	resp := post(t, sys.url+"/api/chat", textConversation("llama3.1:8b", 2, 1, nil), nil)
	readAll(t, resp.Body)
	if limit := header(resp, "X-Ctxproxy-Limit"); limit != 32768-1024 {
		t.Errorf("limit %d, want the window Ollama runs the model with (32768) less the reserve", limit)
	}
}
