package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// An OpenAI client given the base URL without /v1 is told what to change
// instead of getting Ollama's bare "404 page not found"; a backend that
// serves the route, or answers its own JSON 404, passes through as sent.
func TestMissingV1IsExplained(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "ok"})
	sys := newSystem(t, be.URL, setup{})
	for _, path := range []string{"/chat/completions", "/models", "/embeddings"} {
		resp, err := http.Post(sys.url+path, "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct{ Message, Type, Code string } `json:"error"`
		}
		if resp.StatusCode != http.StatusNotFound || json.Unmarshal(body, &e) != nil ||
			!strings.Contains(e.Error.Message, "base URL with /v1") || !strings.Contains(e.Error.Message, "/v1"+path) ||
			!strings.Contains(e.Error.Message, strings.TrimPrefix(sys.url, "http://")+"/v1") || e.Error.Code != "not_found" {
			t.Errorf("POST %s: %d %s", path, resp.StatusCode, body)
		}
	}

	// Any other unknown route: Ollama's own answer, byte for byte.
	resp, err := http.Get(sys.url + "/api/nothing")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || string(body) != "404 page not found" {
		t.Errorf("GET /api/nothing: %d %q", resp.StatusCode, body)
	}

	// A backend whose 404 is JSON says what it means itself.
	oa := fakebackend.New(t, fakebackend.OpenAI, fakebackend.Options{Reply: "ok"})
	sys = newSystem(t, oa.URL, setup{})
	resp, err = http.Post(sys.url+"/chat/completions", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(body), "Unknown request URL") {
		t.Errorf("OpenAI backend's own 404 changed: %d %s", resp.StatusCode, body)
	}
}
