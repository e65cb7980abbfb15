package proxy

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// gzipWriter gzips a response whatever the request's Accept-Encoding,
// flushing the compressor with every flush, as some servers and the
// proxies in front of them do.
type gzipWriter struct {
	http.ResponseWriter
	gz *gzip.Writer
}

func (g *gzipWriter) WriteHeader(code int) {
	g.Header().Del("Content-Length")
	g.Header().Set("Content-Encoding", "gzip")
	g.ResponseWriter.WriteHeader(code)
}

func (g *gzipWriter) Write(p []byte) (int, error) { return g.gz.Write(p) }

func (g *gzipWriter) Flush() {
	_ = g.gz.Flush()
	g.ResponseWriter.(http.Flusher).Flush()
}

// TestGzipFromBackendThatIgnoresAcceptEncoding: ctxproxy asks for
// intercepted answers uncompressed; a backend that compresses them anyway
// must not break the translation to OpenAI's shape nor what the session
// records.
func TestGzipFromBackendThatIgnoresAcceptEncoding(t *testing.T) {
	fb := fakebackend.Handler(fakebackend.Ollama, fakebackend.Options{Reply: "Bonjour!"})
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/chat" {
			fb.ServeHTTP(w, r)
			return
		}
		gz := gzip.NewWriter(w)
		defer gz.Close()
		fb.ServeHTTP(&gzipWriter{ResponseWriter: w, gz: gz}, r)
	}))
	t.Cleanup(be.Close)
	sys := newSystem(t, be.URL, setup{})
	cfg := openai.DefaultConfig("unused")
	cfg.BaseURL = sys.url + "/v1"
	client := openai.NewClientWithConfig(cfg)
	req := openai.ChatCompletionRequest{Model: "llama3.1:8b", Messages: []openai.ChatCompletionMessage{
		{Role: "user", Content: "Say hi in French"}}}

	t.Run("translated", func(t *testing.T) {
		resp, err := client.CreateChatCompletion(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Choices[0].Message.Content != "Bonjour!" {
			t.Errorf("content %q", resp.Choices[0].Message.Content)
		}
	})
	t.Run("translated stream", func(t *testing.T) {
		sreq := req
		sreq.Stream = true
		st, err := client.CreateChatCompletionStream(context.Background(), sreq)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var sb strings.Builder
		for {
			c, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, ch := range c.Choices {
				sb.WriteString(ch.Delta.Content)
			}
		}
		if sb.String() != "Bonjour!" {
			t.Errorf("streamed %q", sb.String())
		}
	})
	t.Run("session records the reply", func(t *testing.T) {
		resp := post(t, sys.url+"/api/chat", []byte(`{"model":"llama3.1:8b","messages":[{"role":"user","content":"hi"}]}`),
			map[string]string{"X-Session-ID": "gz"})
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		sys.flush(t)
		sess, err := sys.store.Get(context.Background(), "gz")
		if err != nil {
			t.Fatal(err)
		}
		if len(sess.Messages) != 2 || sess.Messages[1].Content != "Bonjour!" {
			t.Errorf("stored %+v", sess.Messages)
		}
	})
}
