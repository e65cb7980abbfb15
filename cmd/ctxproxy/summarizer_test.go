package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// With summarize.backend set, the summaries are written by that server,
// with summarize.api_key, and the chat backend gets none of the calls.
func TestSummariesGoToTheirOwnBackend(t *testing.T) {
	chatBE := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "ok"})
	sumBE := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "The user and the model talked about the sea."})
	cfg := filepath.Join(t.TempDir(), "ctxproxy.yaml")
	os.WriteFile(cfg, []byte("models:\n  tiny: {max_tokens: 1000, max_output_tokens: 100}\n"), 0o644)
	addr, logs, stop := startServe(t, []string{"--backend", chatBE.URL, "--config", cfg}, map[string]string{
		"CTXPROXY_STRATEGY_MODE":     "summarize",
		"CTXPROXY_SUMMARIZE_BACKEND": sumBE.URL,
		"CTXPROXY_SUMMARIZE_API_KEY": "sk-summarizer",
	})
	defer stop()

	var msgs []map[string]string
	for i := range 20 {
		role := []string{"user", "assistant"}[i%2]
		msgs = append(msgs, map[string]string{"role": role, "content": fmt.Sprintf("turn %d: %s", i, strings.Repeat("the sea is wide and calm ", 8))})
	}
	body, _ := json.Marshal(map[string]any{"model": "tiny", "messages": msgs})
	resp, err := http.Post("http://"+addr+"/ctxproxy/sessions/s1/import", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("import: %s", resp.Status)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/ctxproxy/sessions/s1/compress", nil)
	req.Header.Set("Authorization", "Bearer sk-client") // a client's key, for the chat backend only
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ Summarized int }
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || out.Summarized == 0 {
		t.Fatalf("compress: %s, %d summarized\n%s", resp.Status, out.Summarized, logs.String())
	}
	var calls int
	for _, r := range sumBE.Requests() {
		if r.Path == "/api/chat" {
			calls++
			if g := r.Header.Get("Authorization"); g != "Bearer sk-summarizer" {
				t.Errorf("summarizer backend got Authorization %q", g)
			}
		}
	}
	if calls == 0 {
		t.Errorf("the summarizer backend wrote no summary")
	}
	for _, r := range chatBE.Requests() {
		if r.Path == "/api/chat" {
			t.Errorf("the chat backend got a summarizer call: %s", r.Body)
		}
	}
}
