package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/ctxproxy/ctxproxy/testkit/headless"
)

// TestStatusPageEndToEnd runs ctxproxy (run, as main does) in front of the
// fake Ollama, sends chat requests in a few sessions, and renders
// /ctxproxy/ in headless chromium: the page must show those sessions,
// read through the real admin API with the admin token. Set
// CTXPROXY_STATUS_SCREENSHOT=file.png to keep a screenshot.
func TestStatusPageEndToEnd(t *testing.T) {
	headless.Require(t)
	const token = "e2e-admin-token"
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "pong"})
	addr, _, _ := startServe(t, []string{"--backend", be.URL}, map[string]string{"CTXPROXY_ADMIN_TOKEN": token})
	base := "http://" + addr

	admin := func(path string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		return http.DefaultClient.Do(req)
	}
	resp, err := admin("/ctxproxy/sessions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /ctxproxy/sessions with the admin token: status %d, want 200", resp.StatusCode)
	}

	sessions := []string{"e2e-alpha", "e2e/team <b>beta</b>", "e2e-gamma"}
	for i, id := range sessions {
		turns := strings.Repeat(`{"role":"user","content":"tell me more"},{"role":"assistant","content":"sure"},`, i+1)
		body := `{"model":"llama3.1","stream":false,"messages":[` + turns + `{"role":"user","content":"and now?"}]}`
		req, _ := http.NewRequest(http.MethodPost, base+"/api/chat", strings.NewReader(body))
		req.Header.Set("X-Session-ID", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("chat in %q: status %d", id, resp.StatusCode)
		}
	}

	// Sessions are written off the request path: wait until the admin
	// API lists all of them.
	waitFor(t, "the admin API to list every session", func() bool {
		resp, err := admin("/ctxproxy/sessions")
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Sessions []struct {
				ID string `json:"session_id"`
			} `json:"sessions"`
		}
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		return err == nil && len(list.Sessions) >= len(sessions)
	})

	frag := url.Values{"token": {token}, "session": {sessions[1]}}
	page := base + "/ctxproxy/#" + frag.Encode()
	dom, err := headless.DumpDOM(context.Background(), page, headless.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"e2e-alpha", "e2e/team &lt;b&gt;beta&lt;/b&gt;", "e2e-gamma", // every session, ids as text
		be.URL, "Ready", "smart", "llama3.1", // backend, health, strategy, model in use
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered status page lacks %q", want)
		}
	}
	if strings.Contains(dom, "<b>beta</b>") {
		t.Error("a session id was rendered as HTML")
	}
	if strings.Contains(dom, "The admin API needs the token") {
		t.Error("the page did not use the token from the link")
	}
	if !strings.Contains(dom, `<section id="detail" class="panel detail" aria-labelledby="detail-title">`) {
		t.Error("the open session's detail is not shown")
	}

	if file := os.Getenv("CTXPROXY_STATUS_SCREENSHOT"); file != "" {
		name := strings.TrimSuffix(file, filepath.Ext(file)) + "-e2e" + filepath.Ext(file)
		if err := headless.Screenshot(context.Background(), page, name, headless.Options{Height: 1400, Width: 1280}); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", name)
	}
}
