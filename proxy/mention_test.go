package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestMentionPrepares: a model named by a request ctxproxy passes through
// unread (/api/show, /v1/embeddings) is prepared in the background (a
// verbose /api/show of its own), and the request goes to the backend as
// sent.
func TestMentionPrepares(t *testing.T) {
	prepared := make(chan string, 8)
	sent := make(chan string, 8)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model   string `json:"model"`
			Name    string `json:"name"`
			Verbose bool   `json:"verbose"`
		}
		switch r.URL.Path {
		case "/api/version":
			_, _ = w.Write([]byte(`{"version":"0.17.4"}`))
			return
		case "/api/tags":
			_, _ = w.Write([]byte(`{"models":[]}`))
			return
		}
		body := readAll(t, r.Body)
		_ = json.Unmarshal([]byte(body), &req)
		if r.URL.Path == "/api/show" && req.Verbose {
			prepared <- req.Model
		} else {
			sent <- body
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	defer be.Close()
	_, px := newProxy(t, be.URL, Config{})
	for _, c := range []struct{ path, body, model string }{
		{"/api/show", `{"model":"shown"}`, "shown"},
		{"/api/show", `{"name":"old-client"}`, "old-client"},
		{"/v1/embeddings", `{"input":["` + strings.Repeat("x", 10000) + `"],"model":"embedder"}`, "embedder"},
	} {
		resp := post(t, px.URL+c.path, []byte(c.body), nil)
		readAll(t, resp.Body)
		if got := <-sent; got != c.body {
			t.Errorf("%s: forwarded %.40q, want %.40q", c.path, got, c.body)
		}
		select {
		case got := <-prepared:
			if got != c.model {
				t.Errorf("%s: prepared %q, want %q", c.path, got, c.model)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: %q not prepared", c.path, c.model)
		}
	}
}

func TestModelNamed(t *testing.T) {
	for head, want := range map[string]string{
		`{"model":"a","input":"x"}`:                    "a",
		`{"input":"x","model":"a"}`:                    "a",
		`{"name":"a"}`:                                 "a",
		`{"model":"a","input":"cut sho`:                "a",
		`{"input":{"model":"inner"},"model":"a"}`:      "a",
		`{"input":"cut before the model arrives, "mod`: "",
		`{"model":7}`:                                  "",
		`[{"model":"a"}]`:                              "",
		``:                                             "",
	} {
		if got := modelNamed([]byte(head)); got != want {
			t.Errorf("modelNamed(%q) = %q, want %q", head, got, want)
		}
	}
}

// BenchmarkMention: what reading a pass-through body through mention
// costs over reading it plainly: an embedding request of 1,000 inputs
// (about 60 KB) that names its model first, as Ollama's clients do.
//
//	go test ./proxy -run '^$' -bench Mention -benchmem
func BenchmarkMention(b *testing.B) {
	body := []byte(`{"model":"nomic-embed-text","input":[` + strings.TrimSuffix(strings.Repeat(`"a sentence of about fifty bytes to embed, or so.",`, 1000), ",") + `]}`)
	b.Run("plain", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			_, _ = io.Copy(io.Discard, io.NopCloser(bytes.NewReader(body)))
		}
	})
	b.Run("mention", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			m := &mention{ReadCloser: io.NopCloser(bytes.NewReader(body)), prepare: func([]string) {}}
			_, _ = io.Copy(io.Discard, m)
			_ = m.Close()
		}
	})
}
