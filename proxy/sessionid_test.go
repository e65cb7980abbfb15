package proxy

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// TestScopedSessionNeedsItsCredential: a session made under a credential
// is reached only with that credential. A caller without one (no header,
// or an empty one) naming the scoped id is refused before anything is
// forwarded or stored; a caller with another credential naming it gets a
// session of its own; the owner may name it either way. Anthropic's
// X-Api-Key and Azure's Api-Key scope as Authorization does.
func TestScopedSessionNeedsItsCredential(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{cfg: Config{Planning: plan.Config{Accumulate: true},
		ScopeHeaders: []string{"Authorization", "X-Api-Key", "Api-Key"}}})
	say := func(id, text string, h map[string]string) *http.Response {
		t.Helper()
		hdr := map[string]string{"X-Session-ID": id}
		for k, v := range h {
			hdr[k] = v
		}
		resp := post(t, sys.url+"/api/chat", []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"`+text+`"}]}`), hdr)
		readAll(t, resp.Body)
		sys.flush(t)
		return resp
	}
	alice := map[string]string{"Authorization": "Bearer key-alice"}
	scoped := say("shared", "alice's secret", alice).Header.Get("X-Ctxproxy-Session")
	if !isScoped(scoped) {
		t.Fatalf("scoped id %q", scoped)
	}
	sent := len(be.Requests())
	for name, h := range map[string]map[string]string{"no credential": nil, "empty Authorization": {"Authorization": ""}} {
		resp := say(scoped, "tell me what was said", h)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s naming %q: %d, want 403", name, scoped, resp.StatusCode)
		}
	}
	if n := len(be.Requests()); n != sent {
		t.Errorf("a refused turn reached the backend (%d requests, want %d)", n, sent)
	}
	mallory := say(scoped, "tell me what was said", map[string]string{"Authorization": "Bearer key-mallory"})
	if got, _ := be.Last("/api/chat"); bytes.Contains(got.Body, []byte("alice's secret")) {
		t.Errorf("another credential naming the scoped id got its history: %s", got.Body)
	}
	if id := mallory.Header.Get("X-Ctxproxy-Session"); id == scoped || !strings.HasPrefix(id, scoped+"~") {
		t.Errorf("another credential naming %q got session %q, want one of its own", scoped, id)
	}
	// The owner names it by the id it sent or by the scoped id.
	again := say(scoped, "and again", alice)
	if id := again.Header.Get("X-Ctxproxy-Session"); id != scoped {
		t.Errorf("the owner naming its scoped id got %q, want %q", id, scoped)
	}
	if got, _ := be.Last("/api/chat"); !bytes.Contains(got.Body, []byte("alice's secret")) {
		t.Errorf("the owner lost its history: %s", got.Body)
	}
	// Two SDK keys, one session id: two sessions.
	a := say("sdk", "one", map[string]string{"X-Api-Key": "sk-ant-1"}).Header.Get("X-Ctxproxy-Session")
	b := say("sdk", "two", map[string]string{"Api-Key": "azure-2"}).Header.Get("X-Ctxproxy-Session")
	if a == b || !isScoped(a) || !isScoped(b) {
		t.Errorf("X-Api-Key and Api-Key callers share or lack a scope: %q %q", a, b)
	}
	// Clients keep their 256 bytes under a scope.
	long := strings.Repeat("é", 128)
	if resp := say(long, "hi", alice); resp.StatusCode != http.StatusOK || resp.Header.Get("X-Ctxproxy-Session") != long+resp.Header.Get("X-Ctxproxy-Session")[len(long):] {
		t.Errorf("a 256-byte id with a credential: %d %q", resp.StatusCode, resp.Header.Get("X-Ctxproxy-Session"))
	}
	if resp := say(long+"x", "hi", alice); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a 257-byte id: %d, want 400", resp.StatusCode)
	}
}

// TestSessionFromClientIDs: without a session header, a session is named
// after the id a coding agent sends of its own: Claude Code's header or
// its metadata, Codex's Session-Id, opencode's X-Session-Affinity; a
// prompt_cache_key together with the fingerprint, so conversations that
// share a key stay apart. Two runs of the same prompt never share a
// session; the session header still wins, a credential still scopes, and
// session.client_ids: false leaves the fingerprint.
func TestSessionFromClientIDs(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	_, px := newProxy(t, be.URL, Config{ScopeHeaders: []string{"X-Api-Key"}})
	messages := func(user string) string {
		return `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"` + user + `"}]`
	}
	session := func(path, body string, h map[string]string) string {
		t.Helper()
		resp := post(t, px.URL+path, []byte(body), h)
		readAll(t, resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", path, resp.StatusCode)
		}
		return resp.Header.Get("X-Ctxproxy-Session")
	}
	const run1, run2 = "eaf42883-e893-41c7-b163-1d3f01b99093", "5b0c1d2e-0000-4000-8000-000000000002"
	meta := func(id string) string {
		return `,"metadata":{"user_id":"{\"device_id\":\"d1\",\"account_uuid\":\"\",\"session_id\":\"` + id + `\"}"}}`
	}
	cases := []struct {
		name, path, body string
		h                map[string]string
		want             string
	}{
		{"claude code header", "/v1/messages", messages("hi") + "}", map[string]string{"X-Claude-Code-Session-Id": run1}, "claude-code-" + run1},
		{"claude code metadata", "/v1/messages", messages("hi") + meta(run2), nil, "claude-code-" + run2},
		{"claude code before 2.1", "/v1/messages", messages("hi") + `,"metadata":{"user_id":"user_ab12_account__session_` + run1 + `"}}`, nil, "claude-code-" + run1},
		{"codex", "/v1/responses", `{"model":"m","input":"hi","prompt_cache_key":"` + run1 + `"}`, map[string]string{"Session-Id": run2}, "codex-" + run2},
		{"opencode", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, map[string]string{"X-Session-Affinity": "ses_dd9c"}, "opencode-ses_dd9c"},
		{"the session header wins", "/v1/messages", messages("hi") + "}", map[string]string{"X-Claude-Code-Session-Id": run1, "X-Session-ID": "mine"}, "mine"},
	}
	for _, c := range cases {
		if got := session(c.path, c.body, c.h); got != c.want {
			t.Errorf("%s: session %q, want %q", c.name, got, c.want)
		}
	}
	// Scoped by the credential, as any other id.
	if got := session("/v1/messages", messages("hi")+"}", map[string]string{"X-Claude-Code-Session-Id": run1, "X-Api-Key": "k"}); !strings.HasPrefix(got, "claude-code-"+run1+"~") {
		t.Errorf("with a credential: session %q, want it scoped", got)
	}
	// prompt_cache_key: with the fingerprint.
	chat := func(user, key string) string {
		return session("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"`+user+`"}],"prompt_cache_key":"`+key+`"}`, nil)
	}
	a, b, c, d := chat("hi", "k1"), chat("hi", "k1"), chat("hi", "k2"), chat("other", "k1")
	if !strings.HasPrefix(a, "key-") || a != b || a == c || a == d {
		t.Errorf("prompt_cache_key sessions %q %q %q %q: want the same key and conversation alike, others apart", a, b, c, d)
	}
	// Two runs of one prompt.
	if x, y := session("/v1/messages", messages("hi")+meta(run1), nil), session("/v1/messages", messages("hi")+meta(run2), nil); x == y {
		t.Errorf("two runs share session %q", x)
	}
	_, off := newProxy(t, be.URL, Config{NoClientIDs: true})
	resp := post(t, off.URL+"/v1/messages", []byte(messages("hi")+"}"), map[string]string{"X-Claude-Code-Session-Id": run1})
	readAll(t, resp.Body)
	if got := resp.Header.Get("X-Ctxproxy-Session"); !strings.HasPrefix(got, "fp-") {
		t.Errorf("client ids off: session %q, want a fingerprint", got)
	}
}
