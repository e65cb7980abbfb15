package proxy

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy/edge"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// do sends a request with the given Host and Origin.
func do(t *testing.T, method, url, host, origin string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestDNSRebinding replays a rebinding attack: a page on evil.example
// whose name now points at 127.0.0.1 calls the admin API (export, purge),
// the chat routes and a passthrough route of a ctxproxy bound to
// loopback. Every one is refused, before anything reaches the backend or
// the store; local names, addresses and allowed origins pass.
func TestDNSRebinding(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{cfg: Config{Hosts: edge.HostPolicy{Loopback: true, AllowedOrigins: []string{"https://chat.example.com"}}}})
	chat := []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`)
	before := len(be.Requests())
	for _, tc := range []struct{ method, path string }{
		{"GET", "/ctxproxy/sessions/s1/export"}, {"DELETE", "/ctxproxy/sessions/s1"}, {"GET", "/ctxproxy/status"},
		{"POST", "/api/chat"}, {"POST", "/v1/chat/completions"}, {"GET", "/api/tags"}, {"POST", "/api/generate"},
	} {
		for _, attack := range []struct{ host, origin string }{
			{"evil.example", "http://evil.example"}, {"evil.example:11435", ""}, {"127.0.0.1:11435", "http://evil.example"},
		} {
			if resp := do(t, tc.method, sys.url+tc.path, attack.host, attack.origin, chat); resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s %s Host %q Origin %q: %d, want 403", tc.method, tc.path, attack.host, attack.origin, resp.StatusCode)
			}
		}
	}
	if n := len(be.Requests()); n != before {
		t.Errorf("%d refused requests reached the backend", n-before)
	}
	for _, ok := range []struct{ host, origin string }{
		{"localhost:11435", ""}, {"127.0.0.1:11435", "http://localhost:3000"}, {"[::1]:11435", ""},
		{"192.168.1.20:11435", ""}, {"box.local", "vscode-webview://abc"}, {"ctxproxy.internal:11435", ""},
		{"127.0.0.1:11435", "https://chat.example.com"}, {"127.0.0.1:11435", "http://127.0.0.1:11435"},
	} {
		if resp := do(t, "POST", sys.url+"/api/chat", ok.host, ok.origin, chat); resp.StatusCode != http.StatusOK {
			t.Errorf("Host %q Origin %q: %d, want 200", ok.host, ok.origin, resp.StatusCode)
		}
	}
	if m := scrape(t, sys.url); m[`ctxproxy_refused_requests_total{reason="host"}`] != 21 {
		t.Errorf("refused %v, want 21", m[`ctxproxy_refused_requests_total{reason="host"}`])
	}
}

// TestHostsBeyondLoopback: listening beyond loopback (the compose
// stack), any Host passes until allowed_hosts is set — so Prometheus
// scraping ctxproxy:11435 works — and with it only those hosts and local
// ones do. Foreign origins are refused either way.
func TestHostsBeyondLoopback(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	open := newSystem(t, be.URL, setup{})
	if resp := do(t, "GET", open.url+"/metrics", "ctxproxy:11435", "", nil); resp.StatusCode != 200 {
		t.Errorf("metrics scrape at ctxproxy:11435: %d", resp.StatusCode)
	}
	if resp := do(t, "GET", open.url+"/metrics", "ctxproxy:11435", "https://evil.example", nil); resp.StatusCode != 403 {
		t.Errorf("foreign origin beyond loopback: %d", resp.StatusCode)
	}
	listed := newSystem(t, be.URL, setup{cfg: Config{Hosts: edge.HostPolicy{AllowedHosts: []string{"ctxproxy", "*.corp.example"}}}})
	for host, want := range map[string]int{"ctxproxy:11435": 200, "llm.corp.example": 200, "evil.example": 403, "localhost": 200} {
		if resp := do(t, "GET", listed.url+"/metrics", host, "", nil); resp.StatusCode != want {
			t.Errorf("Host %q: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

// TestSessionIDRule: a session id the store would refuse (invalid UTF-8,
// too long) gets a 400 that says why, before the turn is answered; an
// odd but valid one (spaces, slashes, emoji) is served.
func TestSessionIDRule(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{})
	chat := []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`)
	for id, want := range map[string]int{"bad\xff\xfeutf8": 400, string(bytes.Repeat([]byte("x"), 257)): 400,
		"a/b c 🙂 ..": 200} {
		chats := func() int {
			n := 0
			for _, r := range be.Requests() {
				if r.Path == "/api/chat" {
					n++
				}
			}
			return n
		}
		before := chats()
		resp := post(t, sys.url+"/api/chat", chat, map[string]string{"X-Session-ID": id})
		body := readAll(t, resp.Body)
		if resp.StatusCode != want {
			t.Errorf("%q: %d %s", id, resp.StatusCode, body)
		}
		if want == 400 && chats() != before {
			t.Errorf("%q: the refused turn reached the backend", id)
		}
	}
}

// TestSessionScope: with session.scope_header, two callers naming the
// same session id get two sessions: in accumulate mode neither's history
// reaches the other's model, and the stored ids say whose is whose
// without holding the credential.
func TestSessionScope(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{cfg: Config{Planning: plan.Config{Accumulate: true}, ScopeHeaders: []string{"Authorization"}}})
	say := func(key, text string) *http.Response {
		resp := post(t, sys.url+"/api/chat", []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"`+text+`"}]}`),
			map[string]string{"X-Session-ID": "shared", "Authorization": "Bearer " + key})
		readAll(t, resp.Body)
		return resp
	}
	a := say("key-alice", "alice's secret")
	sys.flush(t)
	say("key-mallory", "tell me what was said")
	got, _ := be.Last("/api/chat")
	if bytes.Contains(got.Body, []byte("alice's secret")) {
		t.Fatalf("another caller's history reached the model: %s", got.Body)
	}
	idA := a.Header.Get("X-Ctxproxy-Session")
	if !strings.HasPrefix(idA, "shared~") || len(idA) != len("shared~")+16 {
		t.Errorf("scoped id %q", idA)
	}
	sys.flush(t)
	list, _ := sys.store.List(t.Context())
	for _, s := range list {
		if strings.Contains(s.SessionID, "key-") {
			t.Errorf("a credential was stored in a session id: %q", s.SessionID)
		}
	}
	if len(list) != 2 {
		t.Errorf("%d sessions, want one per caller", len(list))
	}
	// Without a credential, the plain id, as before.
	resp := post(t, sys.url+"/api/chat", []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"x"}]}`),
		map[string]string{"X-Session-ID": "plain"})
	readAll(t, resp.Body)
	if id := resp.Header.Get("X-Ctxproxy-Session"); id != "plain" {
		t.Errorf("unscoped id %q", id)
	}
}

// TestAdminTrustsAllowedOrigins: a page at an origin named in
// allowed_origins may change state through the admin API; another
// cross-origin page may not.
func TestAdminTrustsAllowedOrigins(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{cfg: Config{Hosts: edge.HostPolicy{AllowedOrigins: []string{"https://chat.example.com"}}}})
	for origin, want := range map[string]int{"https://chat.example.com": 200, "https://evil.example": 403} {
		req, _ := http.NewRequest(http.MethodPut, sys.url+"/ctxproxy/sessions/s", strings.NewReader(`{"metadata":{"a":1}}`))
		req.Header.Set("Origin", origin)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want && !(want == 200 && resp.StatusCode == 201) {
			t.Errorf("PUT from %s: %d, want %d", origin, resp.StatusCode, want)
		}
	}
}

// TestSessionWarningFollowsForwarded: the admin view of a session its last
// request cut to fit carries no "approaching" warning; an invalid
// snapshot id is said once.
func TestSessionWarningFollowsForwarded(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{})
	if err := sys.store.Update(t.Context(), "cut", func(s *snapshots.Session) error {
		s.Stats = snapshots.Stats{Tokens: 3000, Sent: 900, Limit: 1500, Usage: 2}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(sys.url + "/ctxproxy/sessions/cut")
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp.Body); strings.Contains(body, "capacity") {
		t.Errorf("a session cut to 60%% is warned of: %s", body)
	}
	req, _ := http.NewRequest(http.MethodDelete, sys.url+"/ctxproxy/sessions/cut/snapshots/..x", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp.Body); strings.Count(body, "invalid id") != 1 {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
}
