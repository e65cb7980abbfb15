package proxytest

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/modelinfo"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// TestStart: the proxy answers its admin API behind the token, reports
// the fixed GPU, forwards /api/ps to the front with Loaded, and sees
// what Seed stored.
func TestStart(t *testing.T) {
	p := Start(t, Options{AdminToken: "secret", Loaded: []modelinfo.Loaded{{Name: "llama3.1:latest", Size: 6 * GiB, SizeVRAM: 5 * GiB}}})
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest("GET", p.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, _ := get("/ctxproxy/status", ""); code != http.StatusUnauthorized {
		t.Errorf("status without the token: %d", code)
	}
	if code, body := get("/ctxproxy/status", "secret"); code != 200 || !strings.Contains(body, `"name":"NVIDIA GeForce RTX 4090"`) ||
		!strings.Contains(body, `"used":5476083302`) {
		t.Errorf("status: %d %s", code, body)
	}
	if code, body := get("/api/ps", ""); code != 200 || !strings.Contains(body, `"size_vram":5368709120`) {
		t.Errorf("/api/ps: %d %s", code, body)
	}
	p.Seed(t, "s1", "llama3.1", snapshots.Message{Role: "user", Content: "hello"})
	if code, body := get("/ctxproxy/sessions/s1", "secret"); code != 200 || !strings.Contains(body, `"messages":1`) {
		t.Errorf("seeded session: %d %s", code, body)
	}
	if s := p.Session(t, "s1"); s == nil || s.Model != "llama3.1" {
		t.Errorf("Session = %+v", s)
	}
}
