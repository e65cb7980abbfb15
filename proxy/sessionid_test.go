package proxy

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

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
	sys := newSystem(t, be.URL, setup{cfg: Config{Accumulate: true,
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
