package proxy

import (
	"log/slog"

	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// chatBody100K is a 100-message, ~100 KB Ollama chat request.
func chatBody100K() []byte {
	var b strings.Builder
	b.WriteString(`{"model":"llama3.1:8b","stream":false,"options":{"temperature":0.2},"messages":[{"role":"system","content":"You are a helpful assistant."}`)
	for i := 0; i < 100; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(&b, `,{"role":%q,"content":%q}`, role, strings.Repeat(fmt.Sprintf("message %d says something useful. ", i), 30))
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkPassthrough measures what ctxproxy adds to a request: direct to
// a trivial backend, through ctxproxy on a route it does not intercept, and
// through ctxproxy on the chat route with a 100 KB body.
func BenchmarkPassthrough(b *testing.B) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model":"llama3.1:8b","message":{"role":"assistant","content":"ok"},"done":true,"prompt_eval_count":10,"eval_count":1}`)
	}))
	defer backend.Close()
	s, err := New(Config{Backend: backend.URL}, Deps{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	px := httptest.NewServer(s)
	defer px.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	body := chatBody100K()
	do := func(b *testing.B, url string, body []byte) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := client.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	b.Run("direct", func(b *testing.B) { do(b, backend.URL+"/api/chat", body) })
	b.Run("proxy-other-route", func(b *testing.B) { do(b, px.URL+"/api/generate", body) })
	b.Run("proxy-chat-100KB", func(b *testing.B) { do(b, px.URL+"/api/chat", body) })
}

func BenchmarkDecodeChat(b *testing.B) {
	body := chatBody100K()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := wire.DecodeChat(wire.Ollama, body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChat measures a small chat request through the whole pipeline
// (session, sizing, counting, trimming check, recording) against a fake
// Ollama, next to the same request sent direct.
func BenchmarkChat(b *testing.B) {
	be := fakebackend.New(b, fakebackend.Ollama, fakebackend.Options{Reply: "ok"})
	sys := newSystem(b, be.URL, setup{})
	sys.srv.log = slog.New(slog.DiscardHandler)
	body := []byte(`{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":"hi"}]}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for _, tc := range []struct{ name, url string }{{"direct", be.URL}, {"ctxproxy", sys.url}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Post(tc.url+"/api/chat", "application/json", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}
