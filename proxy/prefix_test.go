package proxy

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

func msgs(tokens ...int) []rewrite.Message {
	out := make([]rewrite.Message, len(tokens))
	for i, n := range tokens {
		out[i] = rewrite.Message{Role: []string{"user", "assistant"}[i%2], Content: "message " + string(rune('a'+i)), Tokens: n}
	}
	return out
}

// The share of a prompt the previous one began with, by tokens: a
// resend with the reply and a new turn appended keeps its whole history;
// a change in the middle keeps what stands before it; the first turn has
// nothing to compare with.
func TestPrefixKept(t *testing.T) {
	ps := newPrefixes()
	if _, ok := ps.kept("s", msgs(10, 20), nil); ok {
		t.Errorf("a first turn measured a prefix")
	}
	share, ok := ps.kept("s", msgs(10, 20, 30, 40), nil)
	if !ok || math.Abs(share-0.3) > 1e-9 {
		t.Errorf("appended turn: share %v, %v; want 0.3 (30 of 100 tokens)", share, ok)
	}
	cut := msgs(10, 20, 30, 40)
	cut[1].Content = "a summary in place of the old turns"
	if share, _ := ps.kept("s", cut, nil); math.Abs(share-0.1) > 1e-9 {
		t.Errorf("changed second message: share %v, want 0.1", share)
	}
	if share, _ := ps.kept("s", cut, nil); share != 1 {
		t.Errorf("the same prompt again: share %v, want 1", share)
	}
	uncounted := msgs(0, 0, 0, 0)
	ps.kept("u", uncounted[:2], nil)
	if share, _ := ps.kept("u", uncounted, nil); share != 0.5 {
		t.Errorf("uncounted messages: share %v, want 0.5 (by messages)", share)
	}
	if _, ok := ps.kept("other", msgs(10), nil); ok {
		t.Errorf("sessions share prefixes")
	}
	// An image of another size is another prompt: the backend's cache
	// ends before it.
	seen := msgs(10, 20)
	seen[1].Images = []chat.Image{{Width: 640, Height: 480}}
	ps.kept("i", seen, nil)
	other := msgs(10, 20)
	other[1].Images = []chat.Image{{Width: 64, Height: 4800}}
	if share, _ := ps.kept("i", other, nil); math.Abs(share-1.0/3) > 1e-9 {
		t.Errorf("an image of another size: share %v, want 1/3 (10 of 30 tokens)", share)
	}
	// The reply the backend generated is in its cache too: a chat that
	// resends it keeps it.
	turn := msgs(10, 20, 30, 40)
	ps.kept("r", turn[:2], &rewrite.Message{Role: turn[2].Role, Content: turn[2].Content})
	if share, _ := ps.kept("r", turn, nil); math.Abs(share-0.6) > 1e-9 {
		t.Errorf("with the reply resent: share %v, want 0.6 (60 of 100 tokens)", share)
	}
}

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

// BenchmarkPrefixKept is a resent 100-message, 100 KB conversation's
// prefix measure, after the reply, per recorded turn.
func BenchmarkPrefixKept(b *testing.B) {
	ms := make([]rewrite.Message, 100)
	for i := range ms {
		ms[i] = rewrite.Message{Role: "user", Content: strings.Repeat("message says something useful. ", 33), Tokens: 250}
	}
	ps := newPrefixes()
	ps.kept("s", ms, nil)
	b.ReportAllocs()
	for b.Loop() {
		ps.kept("s", ms, nil)
	}
}
