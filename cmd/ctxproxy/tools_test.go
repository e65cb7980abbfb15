package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

func TestCountJSON(t *testing.T) {
	body := `{"model":"gpt-4","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hello, world!"}]}`
	var out bytes.Buffer
	err := run(context.Background(), []string{"count", "--local", "--json"}, envOf(nil), strings.NewReader(body), &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var rep countReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if rep.Model != "gpt-4" || rep.Limit != 8192-4096 || len(rep.Messages) != 2 {
		t.Errorf("report %+v", rep)
	}
	// OpenAI bills 3 tokens a message + the role + the content, and 3 of
	// reply priming; in cl100k_base "You are terse." and "Hello, world!"
	// are 4 tokens each, "system" and "user" 1.
	if rep.Messages[0].Tokens != 8 || rep.Messages[1].Tokens != 8 || rep.Total != 19 {
		t.Errorf("tokens %+v total %d, want 8, 8 and 19", rep.Messages, rep.Total)
	}
	sum := 0
	for _, m := range rep.Messages {
		sum += m.Tokens
	}
	if rep.Usage <= 0 || sum > rep.Total {
		t.Errorf("usage %v, messages %d of total %d", rep.Usage, sum, rep.Total)
	}
}

func TestCountPlainTextAndFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "req.json")
	os.WriteFile(file, []byte(`{"model":"llama3.1","messages":[{"role":"user","content":"hi"}],"options":{"num_ctx":4096}}`), 0o644)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"count", "--local", file}, envOf(nil), nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "model llama3.1") || !strings.Contains(out.String(), "limit 3072") {
		t.Errorf("text output:\n%s", out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"count", "--local", "--model", "gpt-4o", "-"}, envOf(nil),
		strings.NewReader("just some plain text, not JSON"), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	// Plain text is one user message: 3 tokens of structure, 1 for the
	// role and 7 for the text in o200k_base, plus 3 of reply priming.
	if !strings.Contains(out.String(), "model gpt-4o (estimate:o200k_base (here, uncalibrated)): 14 tokens") {
		t.Errorf("plain text output:\n%s", out.String())
	}
	if err := run(context.Background(), []string{"count", filepath.Join(dir, "missing.json")}, envOf(nil), nil, io.Discard, io.Discard); err == nil {
		t.Error("missing file accepted")
	}
}

func TestGPUCommand(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	var out bytes.Buffer
	err := run(context.Background(), []string{"gpu", "--local", "--json", "--backend", be.URL, "--model", "llama3.1:8b"},
		envOf(nil), nil, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Devices []struct {
			Vendor            string
			Total, Used, Free uint64
		} `json:"devices"`
		Model struct {
			Name          string `json:"name"`
			BytesPerToken uint64 `json:"bytes_per_token"`
			NumCtx        int    `json:"num_ctx"`
			Reason        string `json:"reason"`
		} `json:"model"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	// This machine has no GPU: ctxproxy falls back to system memory.
	if len(rep.Devices) == 0 || rep.Devices[0].Total == 0 {
		t.Errorf("devices %+v", rep.Devices)
	}
	if rep.Model.BytesPerToken != 128<<10 || rep.Model.NumCtx%2048 != 0 || rep.Model.NumCtx == 0 || rep.Model.Reason == "" {
		t.Errorf("model %+v", rep.Model)
	}
	out.Reset()
	if err := run(context.Background(), []string{"gpu", "--local"}, envOf(nil), nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "TOTAL") {
		t.Errorf("text output:\n%s", out.String())
	}
}

// TestCountUsesRunningProxy: with a ctxproxy running, `ctxproxy count`
// counts with it: exactly, by the model's own tokenizer, the number its
// backend then evaluates.
func TestCountUsesRunningProxy(t *testing.T) {
	m := &fakebackend.ModelSpec{Vocab: vocabgen.BPE(3000, "llama-bpe", 1)}
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Model: m, Pretokenizer: exact.Pretokenizer("llama-bpe"), DefaultNumCtx: 1 << 20})
	addr, _, stop := startServe(t, []string{"--backend", be.URL}, nil)
	defer stop()
	body := `{"model":"tiny","stream":false,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"` + vocabgen.Words(40, 3)[5] + ` stands here, tall and bright."}]}`
	var out bytes.Buffer
	if err := run(context.Background(), []string{"count", "--json", "--proxy", "http://" + addr}, envOf(nil), strings.NewReader(body), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep countReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+addr+"/api/chat", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var chat struct {
		PromptEvalCount int `json:"prompt_eval_count"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&chat)
	resp.Body.Close()
	if !rep.Exact || rep.Total != chat.PromptEvalCount || !strings.Contains(rep.Source, ":gpt2/llama-bpe") || len(rep.Messages) != 2 {
		t.Errorf("count %+v; the backend evaluated %d", rep, chat.PromptEvalCount)
	}
}

// TestGPUAsksRunningProxy: with a ctxproxy running, `ctxproxy gpu` shows
// its view (the num_ctx it chose for the model) and says so.
func TestGPUAsksRunningProxy(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	addr, _, stop := startServe(t, []string{"--backend", be.URL}, nil)
	defer stop()
	resp, err := http.Post("http://"+addr+"/api/chat", "application/json",
		strings.NewReader(`{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	chosen := resp.Header.Get("X-Ctxproxy-Num-Ctx")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"gpu", "--json", "--model", "llama3.1:8b", "--proxy", "http://" + addr},
		envOf(nil), nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Source string `json:"source"`
		Model  struct {
			NumCtx int `json:"num_ctx"`
		} `json:"model"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Source, "running ctxproxy") || fmt.Sprint(rep.Model.NumCtx) != chosen {
		t.Errorf("gpu: source %q, num_ctx %d; the proxy chose %s", rep.Source, rep.Model.NumCtx, chosen)
	}
}

// TestCountRedactsProxyPassword: count's report and its warning name the
// ctxproxy asked with the password of --proxy hidden.
func TestCountRedactsProxyPassword(t *testing.T) {
	for _, answer := range []string{`{"model":"m","count":3,"exact":true,"source":"remote"}`, ""} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if answer == "" {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			io.WriteString(w, answer)
		}))
		var out bytes.Buffer
		err := run(context.Background(), []string{"count", "--json", "--proxy", strings.Replace(srv.URL, "http://", "http://u:s3cret@", 1)},
			envOf(nil), strings.NewReader("some text"), &out, &out)
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out.String(), "s3cret") || !strings.Contains(out.String(), "u:xxxxx@") {
			t.Errorf("count with the ctxproxy answering %q:\n%s", answer, out.String())
		}
	}
}

// With a ctxproxy running that has not served the model, `ctxproxy gpu
// --model` sizes it against that proxy's backend, not the default
// 127.0.0.1:11434, and says so.
func TestGPUSizesAgainstTheRunningProxysBackend(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	addr, _, stop := startServe(t, []string{"--backend", be.URL}, nil)
	defer stop()
	var out, errw bytes.Buffer
	if err := run(context.Background(), []string{"gpu", "--json", "--model", "llama3.1:8b", "--proxy", "http://" + addr},
		envOf(nil), nil, &out, &errw); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Source string `json:"source"`
		Model  struct {
			BytesPerToken int    `json:"bytes_per_token"`
			Reason        string `json:"reason"`
		} `json:"model"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Source, be.URL) || !strings.Contains(rep.Source, "the backend of the ctxproxy at http://"+addr) ||
		rep.Model.BytesPerToken == 0 || strings.Contains(errw.String(), "model facts") {
		t.Errorf("gpu: source %q, model %+v, stderr %q", rep.Source, rep.Model, errw.String())
	}
}

// A proxy whose backend URL carries credentials shows it with them
// hidden: gpu does not size against that, and says what it sized against.
func TestGPUIgnoresARedactedBackend(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	addr, _, stop := startServe(t, []string{"--backend", strings.Replace(be.URL, "http://", "http://user:s3cret@", 1)}, nil)
	defer stop()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"gpu", "--json", "--model", "llama3.1:8b", "--proxy", "http://" + addr},
		envOf(nil), nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Source string `json:"source"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(rep.Source, "xxxxx") || strings.Contains(rep.Source, "s3cret") || !strings.Contains(rep.Source, "127.0.0.1:11434") {
		t.Errorf("gpu sized against %q", rep.Source)
	}
}
