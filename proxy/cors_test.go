package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/proxy/edge"
)

// corsBackend answers preflights as Ollama's CORS middleware does: the
// origin checked, its own fixed list of allowed headers (which names none
// of ctxproxy's), and Access-Control-Allow-Origin on every answer to an
// allowed origin.
func corsBackend(t *testing.T) (*httptest.Server, *[]string) {
	var asked []string
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin != "" && origin != "http://localhost:3000" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		if origin != "" {
			w.Header().Set("Access-Control-Allow-Origin", origin)
		}
		if r.Method == http.MethodOptions {
			asked = append(asked, r.Header.Get("Access-Control-Request-Headers"))
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
			w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model":"m","message":{"role":"assistant","content":"hi"},"done":true,"prompt_eval_count":5,"eval_count":1}`)
	}))
	t.Cleanup(be.Close)
	return be, &asked
}

// TestPreflightAllowsOwnHeaders: a browser page may name its session and
// read ctxproxy's answers. The preflight reaches the backend without
// ctxproxy's own headers; the answer allows them when the backend allowed
// the origin, and only then.
func TestPreflightAllowsOwnHeaders(t *testing.T) {
	be, asked := corsBackend(t)
	_, px := newProxy(t, be.URL, Config{Hosts: edge.HostPolicy{AllowedOrigins: []string{"http://localhost:3000", "https://evil.example"}}})
	preflight := func(origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodOptions, px.URL+"/api/chat", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "content-type,x-session-id,x-ctxproxy-strategy")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := preflight("http://localhost:3000")
	allowed := strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers"))
	if resp.StatusCode != http.StatusNoContent || !strings.Contains(allowed, "x-session-id") ||
		!strings.Contains(allowed, "x-ctxproxy-strategy") || !strings.Contains(allowed, "content-type") {
		t.Errorf("preflight: %d, Access-Control-Allow-Headers %q", resp.StatusCode, allowed)
	}
	if len(*asked) != 1 || (*asked)[0] != "content-type" {
		t.Errorf("the backend was asked for %q, want only content-type", *asked)
	}
	if resp := preflight("https://evil.example"); resp.StatusCode != http.StatusForbidden ||
		strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "x-session-id") {
		t.Errorf("an origin the backend refuses: %d %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Headers"))
	}

	resp = post(t, px.URL+"/api/chat", []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`),
		map[string]string{"Origin": "http://localhost:3000", "X-Session-ID": "browser"})
	io.Copy(io.Discard, resp.Body)
	exposed := resp.Header.Get("Access-Control-Expose-Headers")
	for _, h := range []string{"X-Ctxproxy-Session", "X-Ctxproxy-Dropped"} {
		if !strings.Contains(exposed, h) {
			t.Errorf("Access-Control-Expose-Headers %q lacks %s", exposed, h)
		}
	}
}
