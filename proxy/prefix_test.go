package proxy

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// A chat UI's replay: the second turn keeps the first turn's prompt; a
// turn cut to fewer messages keeps only what stands before the cut. The
// metric and the session's stats say so.
func TestPrefixKeptRecorded(t *testing.T) {
	long := func(s string) string { return strings.TrimSpace(strings.Repeat(s+" ", 30)) }
	reply := long("a reply")
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: reply})
	e := newAdminEnv(t, "", func(c *Config, _ *Deps) { c.Backend = be.URL })
	history := []map[string]string{
		{"role": "system", "content": "You are terse."},
		{"role": "user", "content": long("first question")}}
	send := func(header map[string]string) {
		body, _ := json.Marshal(map[string]any{"model": tinyModel, "stream": false, "messages": history})
		resp := post(t, e.ts.URL+"/api/chat", body, header)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	session := map[string]string{"X-Session-ID": "pfx"}
	send(session)
	history = append(history, map[string]string{"role": "assistant", "content": reply},
		map[string]string{"role": "user", "content": long("second question")})
	send(session)
	if err := e.writer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := e.json("GET", sessionPath("pfx"), nil, 200)["stats"].(map[string]any)
	kept, ok := st["prefix_kept"].(float64)
	// The second prompt is a short system prompt, the first question, the
	// reply (half a question's length) and the second question: the
	// first prompt and its reply are about 3/5 of it (2/5 without the
	// reply, which the backend's cache holds too).
	if !ok || kept < 0.55 || kept > 0.65 {
		t.Fatalf("after an appended turn, prefix_kept %v; want about 0.6 (the first prompt and its reply, of the second)", st["prefix_kept"])
	}
	// Capped at the last three messages: the prompt now differs from the
	// second message on, and the backend must read all but the system
	// prompt again.
	history = append(history, map[string]string{"role": "assistant", "content": long("another reply")},
		map[string]string{"role": "user", "content": long("third question")})
	send(map[string]string{"X-Session-ID": "pfx", "X-Ctxproxy-Max-Messages": "3"})
	if err := e.writer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	st = e.json("GET", sessionPath("pfx"), nil, 200)["stats"].(map[string]any)
	if cut := st["prefix_kept"].(float64); cut > 0.1 || cut <= 0 {
		t.Errorf("after a cut, prefix_kept %v; want only the system prompt's small share", cut)
	}
	m := scrape(t, e.ts.URL)
	if n := m["ctxproxy_prefix_kept_ratio_count"]; n != 2 {
		t.Errorf("ctxproxy_prefix_kept_ratio observed %v times, want 2 (the first turn has nothing to compare)", n)
	}
}

// TestPromptCachedRecorded: what the backend says it took from its prompt
// cache (Ollama 0.30 and later) is the session's cached_tokens and a
// metric, beside ctxproxy's own prefix_kept.
func TestPromptCachedRecorded(t *testing.T) {
	cached := 7
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{PromptCached: &cached})
	e := newAdminEnv(t, "", func(c *Config, _ *Deps) { c.Backend = be.URL })
	body, _ := json.Marshal(map[string]any{"model": tinyModel, "stream": false,
		"messages": []map[string]string{{"role": "user", "content": "what is cached"}}})
	resp := post(t, e.ts.URL+"/api/chat", body, map[string]string{"X-Session-ID": "cached"})
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err := e.writer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := e.json("GET", sessionPath("cached"), nil, 200)["stats"].(map[string]any)
	if st["cached_tokens"] != float64(7) {
		t.Errorf("stats.cached_tokens %v, want 7", st["cached_tokens"])
	}
	if n := scrape(t, e.ts.URL)["ctxproxy_prompt_cached_ratio_count"]; n != 1 {
		t.Errorf("ctxproxy_prompt_cached_ratio observed %v times, want 1", n)
	}
}
