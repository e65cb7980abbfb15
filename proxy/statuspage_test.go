package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/testkit/headless"
)

func TestStatusPageRoutes(t *testing.T) {
	_, px := newProxy(t, "http://127.0.0.1:1", Config{})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct {
		name, path string
		status     int
		ctype      string
		contains   string
	}{
		{"page", "/ctxproxy/", 200, "text/html; charset=utf-8", `<script src="ui/app.js" defer></script>`},
		{"script", "/ctxproxy/ui/app.js", 200, "text/javascript; charset=utf-8", "textContent"},
		{"style", "/ctxproxy/ui/app.css", 200, "text/css; charset=utf-8", "prefers-color-scheme: dark"},
		{"no such file", "/ctxproxy/ui/nope.js", 404, "", ""},
		{"no directory listing", "/ctxproxy/ui/", 404, "", ""}, // the admin API answers unknown /ctxproxy/ paths
		{"without the slash", "/ctxproxy", 301, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := noRedirect.Get(px.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.ctype != "" && resp.Header.Get("Content-Type") != tt.ctype {
				t.Errorf("Content-Type %q, want %q", resp.Header.Get("Content-Type"), tt.ctype)
			}
			if tt.status == 200 {
				if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
					t.Errorf("Content-Security-Policy %q", csp)
				}
				if resp.Header.Get("ETag") == "" {
					t.Error("no ETag")
				}
			}
			if !strings.Contains(body, tt.contains) {
				t.Errorf("body does not contain %q", tt.contains)
			}
		})
	}

	// Revalidation: an unchanged page is not sent again.
	resp, err := http.Get(px.URL + "/ctxproxy/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodGet, px.URL+"/ctxproxy/", nil)
	req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation: status %d, want 304", resp.StatusCode)
	}
}

// fakeAdmin serves the admin API's JSON as docs/admin-api.md specifies it,
// for the page to render before the real admin API is wired in.
type fakeAdmin struct {
	token    string
	mu       sync.Mutex
	sessions []map[string]any
	// auth records the Authorization headers received.
	auth []string
	// backends, when set, are the status's servers (several behind it).
	backends []map[string]any
}

const hostileID = `<img src=x onerror="document.title='pwned'">`

func newFakeAdmin(token string) *fakeAdmin {
	now := time.Now().UTC()
	ts := func(d time.Duration) string { return now.Add(-d).Format(time.RFC3339) }
	return &fakeAdmin{token: token, sessions: []map[string]any{
		{"session_id": "chat-alpha", "model": "llama3.1:8b", "created": ts(time.Hour), "updated": ts(4 * time.Second),
			"messages": 24, "tokens": 7421, "limit": 14336, "usage": 0.5177, "requests": 12, "snapshots": 2},
		{"session_id": "team/bob 🙂", "model": "qwen2.5:14b", "created": ts(2 * time.Hour), "updated": ts(90 * time.Second),
			"messages": 61, "tokens": 12950, "limit": 14336, "usage": 0.9033, "requests": 30, "snapshots": 5},
		{"session_id": hostileID, "model": "llama3.1:8b", "created": ts(3 * time.Hour), "updated": ts(20 * time.Minute),
			"messages": 9, "tokens": 11800, "limit": 14336, "usage": 0.8231, "requests": 4, "snapshots": 1},
		{"session_id": "fp-9c1e0b7a44d2f310", "model": "mistral:7b", "created": ts(5 * time.Hour), "updated": ts(3 * time.Hour),
			"messages": 4, "tokens": 610, "limit": 30720, "usage": 0.0199, "requests": 2, "snapshots": 0},
		// Sent at 263% of its limit, cut to 63%.
		{"session_id": "long-chat", "model": "llama3.1:8b", "created": ts(6 * time.Hour), "updated": ts(4 * time.Hour),
			"messages": 140, "tokens": 37704, "limit": 14336, "usage": 2.63, "sent": 9032, "forwarded_usage": 0.63,
			"requests": 70, "snapshots": 3},
	}}
}

func (f *fakeAdmin) authorized(w http.ResponseWriter, r *http.Request) bool {
	f.mu.Lock()
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.mu.Unlock()
	if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":"admin API: missing or wrong bearer token"}`)
		return false
	}
	return true
}

func (f *fakeAdmin) routes(mux *http.ServeMux) {
	reply := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /ctxproxy/status", func(w http.ResponseWriter, r *http.Request) {
		if !f.authorized(w, r) {
			return
		}
		gib := uint64(1 << 30)
		st := map[string]any{
			"version": "v0.9.0-test", "uptime_seconds": 5025,
			"backend":  map[string]any{"url": "http://ollama:11434", "kind": "ollama", "ready": true},
			"strategy": map[string]any{"mode": "smart", "threshold": 0.8, "target": 0.6, "on_overflow": "shrink", "effective_threshold": 0.8},
			"context": map[string]any{"auto": true, "target_size": 0, "min_size": 2048, "max_size": 131072,
				"kv_quantization": "f16", "num_parallel": 1},
			"gpu": map[string]any{"probe": "nvidia", "level": "normal", "total": 24 * gib, "used": 17 * gib, "free": 7 * gib,
				"usage": 0.21, "devices": []map[string]any{
					{"vendor": "nvidia", "name": "NVIDIA GeForce RTX 4090", "total": 24 * gib, "used": 17 * gib, "free": 7 * gib}}},
			"models": []map[string]any{
				{"name": "llama3.1:8b", "max_tokens": 131072, "max_output_tokens": 1024, "effective": 15360, "num_ctx": 16384,
					"bytes_per_token": 131072, "calibration": map[string]any{"ratio": 1.043, "observations": 37},
					"reason": "free 7.0 GiB − buffer 512 MiB → 16384 tokens"},
				{"name": "qwen2.5:14b", "max_tokens": 32768, "max_output_tokens": 1024, "effective": 15360, "num_ctx": 16384,
					"bytes_per_token": 196608, "calibration": map[string]any{"ratio": 0.981, "observations": 12}, "reason": "bucket kept"},
			},
			"snapshots": map[string]any{"store": "file", "auto_threshold": 0.8, "max_count": 20},
			"summarize": map[string]any{"model": "", "keep_recent": 3},
			"sessions":  len(f.sessions), "inflight": 2,
		}
		f.mu.Lock()
		if f.backends != nil {
			st["backends"] = f.backends
		}
		f.mu.Unlock()
		reply(w, st)
	})
	mux.HandleFunc("GET /ctxproxy/sessions", func(w http.ResponseWriter, r *http.Request) {
		if f.authorized(w, r) {
			reply(w, map[string]any{"sessions": f.sessions})
		}
	})
	find := func(id string) map[string]any {
		for _, s := range f.sessions {
			if s["session_id"] == id {
				return s
			}
		}
		return nil
	}
	mux.HandleFunc("GET /ctxproxy/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		if !f.authorized(w, r) {
			return
		}
		s := find(r.PathValue("id"))
		if s == nil {
			w.WriteHeader(http.StatusNotFound)
			reply(w, map[string]any{"error": "no such session"})
			return
		}
		out := map[string]any{"session_id": s["session_id"], "model": s["model"], "created": s["created"],
			"updated": s["updated"], "messages": s["messages"], "snapshots": s["snapshots"],
			"metadata": map[string]any{"project": "<i>docs</i>"},
			"stats": map[string]any{"tokens": s["tokens"], "limit": s["limit"], "usage": s["usage"], "sent": 8012,
				"num_ctx": 16384, "dropped": 14, "summarized": 0, "prompt_tokens": 8190, "completion_tokens": 412,
				"requests": s["requests"], "truncations": 1, "last_truncation": s["updated"], "prefix_kept": 0.957}}
		switch u, _ := s["usage"].(float64); {
		case u >= 0.9:
			out["warning"] = sessions.Warn90
		case u >= 0.8:
			out["warning"] = sessions.Warn80
		}
		reply(w, out)
	})
	mux.HandleFunc("GET /ctxproxy/sessions/{id}/snapshots", func(w http.ResponseWriter, r *http.Request) {
		if !f.authorized(w, r) {
			return
		}
		id := r.PathValue("id")
		now := time.Now().UTC()
		reply(w, map[string]any{"snapshots": []map[string]any{
			{"id": "snap-20250101-0002", "session_id": id, "created": now.Add(-time.Minute).Format(time.RFC3339),
				"model": "llama3.1:8b", "tokens": 11200, "usage": 0.78, "reason": "overflow", "messages": 40, "bytes": 18234},
			{"id": "snap-20250101-0001", "session_id": id, "created": now.Add(-time.Hour).Format(time.RFC3339),
				"model": "llama3.1:8b", "tokens": 9800, "usage": 0.68, "reason": "<b>manual</b>", "messages": 31, "bytes": 15011},
		}})
	})
}

// startFakeStatus serves the real page (from a Server) with the fake
// admin API in front of it.
func startFakeStatus(t *testing.T, token string) (*fakeAdmin, string) {
	t.Helper()
	s, err := New(Config{Backend: "http://127.0.0.1:1"}, Deps{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fa := newFakeAdmin(token)
	mux := http.NewServeMux()
	fa.routes(mux)
	mux.Handle("/", s)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return fa, ts.URL
}

// TestStatusPageInBrowser renders the page in headless chromium against
// the fake admin API and checks what a user would see: every session, ids
// shown as text (a hostile id stays text), the overview, and the open
// session's stats and snapshots. Set CTXPROXY_STATUS_SCREENSHOT=file.png
// to keep a screenshot.
func TestStatusPageInBrowser(t *testing.T) {
	headless.Require(t)
	fa, base := startFakeStatus(t, "s3cret token")
	frag := url.Values{"token": {"s3cret token"}, "session": {"team/bob 🙂"}}
	page := base + "/ctxproxy/#" + frag.Encode()

	dom, err := headless.DumpDOM(context.Background(), page, headless.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"chat-alpha", "team/bob 🙂", "fp-9c1e0b7a44d2f310", // session ids
		"&lt;img src=x onerror=\"document.title='pwned'\"&gt;", // the hostile id, as text
		"http://ollama:11434", "Ready", // backend and health
		"NVIDIA GeForce RTX 4090", "71%", // the VRAM gauge: 17 of 24 GiB
		"smart", "80% of the window", "shrink", // strategy and thresholds
		"llama3.1:8b", "qwen2.5:14b", "×1.043 (37)", // models in use
		"snap-20250101-0002", "overflow", "&lt;b&gt;manual&lt;/b&gt;", // the open session's snapshots
		"&lt;i&gt;docs&lt;/i&gt;",               // its metadata, as text
		"backend truncations", "≥ 90%", "≥ 80%", // stats and warnings
		"prefix kept (prompt cache)", ">96%<", // what the backend's cache could keep
		`class="badge cut" title="ctxproxy cut this conversation to fit: 37,704 tokens as sent (263% of the limit), 9,032 forwarded (63%)">cut`, // a conversation cut to fit
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered page lacks %q", want)
		}
	}
	for _, bad := range []string{"<img", "<b>manual", "<i>docs", "pwned</title>"} {
		if strings.Contains(dom, bad) {
			t.Errorf("rendered page contains %q: API text was turned into HTML", bad)
		}
	}
	if !regexp.MustCompile(`<section id="detail" class="panel detail" aria-labelledby="detail-title">`).MatchString(dom) {
		t.Error("the session detail is not shown")
	}
	fa.mu.Lock()
	auth := fa.auth
	fa.mu.Unlock()
	if len(auth) == 0 || auth[0] != "Bearer s3cret token" {
		t.Errorf("Authorization sent = %q, want the token from the link", auth)
	}

	if file := os.Getenv("CTXPROXY_STATUS_SCREENSHOT"); file != "" {
		screenshots(t, page, file)
	}
}

// screenshots writes the page as file (1280×900, light), and beside it
// file-dark (dark) and file-full (light, tall enough for the session
// detail).
func screenshots(t *testing.T, page, file string) {
	t.Helper()
	ext := filepath.Ext(file)
	for suffix, opts := range map[string]headless.Options{
		"":      {},
		"-dark": {Dark: true},
		"-full": {Width: 1280, Height: 1500},
	} {
		name := strings.TrimSuffix(file, ext) + suffix + ext
		if err := headless.Screenshot(context.Background(), page, name, opts); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", name)
	}
}

// Without the token the page says how to get in, and shows no data.
func TestStatusPageAsksForToken(t *testing.T) {
	headless.Require(t)
	_, base := startFakeStatus(t, "s3cret")
	dom, err := headless.DumpDOM(context.Background(), base+"/ctxproxy/", headless.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dom, "The admin API needs the token") {
		t.Error("no banner asking for the token")
	}
	if strings.Contains(dom, "chat-alpha") {
		t.Error("sessions shown without the token")
	}
}
