// Command shim serves /v1/responses and /v1/messages by carrying them to an
// Ollama's /api/chat with proxy/translate and translating the replies back,
// and passes every other request through. It lets the SDK scripts in
// e2e/sdk check the translations with real clients before, and apart from,
// the proxy's own wiring of the two routes.
//
//	go run ./e2e/sdk/shim -listen 127.0.0.1:11700 -backend http://127.0.0.1:11434
package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"

	"github.com/ctxproxy/ctxproxy/proxy/translate"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:11700", "address to serve on")
	backend := flag.String("backend", "http://127.0.0.1:11434", "Ollama's URL")
	numCtx := flag.Int("num-ctx", 0, "options.num_ctx to ask Ollama for (0: Ollama's default)")
	flag.Parse()
	u, err := url.Parse(*backend)
	if err != nil {
		log.Fatal(err)
	}
	s := &shim{chat: u.JoinPath("/api/chat").String(), opts: translate.RequestOptions{NumCtx: *numCtx}}
	mux := http.NewServeMux()
	mux.Handle("/", httputil.NewSingleHostReverseProxy(u))
	mux.HandleFunc("POST /v1/responses", s.responses)
	mux.HandleFunc("POST /v1/messages", s.messages)
	log.Fatal(http.ListenAndServe(*listen, mux))
}

type shim struct {
	chat string
	opts translate.RequestOptions
}

// converter is what the three stream converters share.
type converter interface {
	Copy(w io.Writer, r io.Reader) error
}

func (s *shim) responses(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	out, info, err := translate.ResponsesRequest(body, s.opts)
	openai := func(e *translate.Error) []byte { return e.JSON() }
	if err != nil {
		writeError(w, err, openai)
		return
	}
	s.forward(w, r, out, info.Stream, openai,
		func(b []byte) ([]byte, error) {
			return translate.ResponsesResponse(b, info, translate.ResponseOptions{})
		},
		translate.NewResponsesStream(info, translate.ResponseOptions{}))
}

func (s *shim) messages(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	out, info, err := translate.MessagesRequest(body, s.opts)
	anthropic := func(e *translate.Error) []byte { return e.AnthropicJSON() }
	if err != nil {
		writeError(w, err, anthropic)
		return
	}
	s.forward(w, r, out, info.Stream, anthropic,
		func(b []byte) ([]byte, error) {
			return translate.MessagesResponse(b, info, translate.ResponseOptions{})
		},
		translate.NewMessagesStream(info, translate.ResponseOptions{}))
}

// forward posts the translated body to /api/chat and translates the answer
// back: an error in the dialect's shape, a whole reply, or the stream,
// flushed line by line.
func (s *shim) forward(w http.ResponseWriter, r *http.Request, body []byte, stream bool,
	errJSON func(*translate.Error) []byte, whole func([]byte) ([]byte, error), st converter) {
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, s.chat, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		writeError(w, &translate.Error{Status: http.StatusBadGateway, Type: "api_error", Message: err.Error()}, errJSON)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		writeError(w, translate.BackendError(resp.StatusCode, b), errJSON)
		return
	}
	if stream {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		if err := st.Copy(w, resp.Body); err != nil {
			log.Printf("stream: %v", err)
		}
		return
	}
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		b, err = whole(b)
	}
	if err != nil {
		writeError(w, err, errJSON)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, err error, errJSON func(*translate.Error) []byte) {
	var te *translate.Error
	if !errors.As(err, &te) {
		te = &translate.Error{Status: http.StatusBadGateway, Type: "api_error", Message: err.Error()}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(te.Status)
	_, _ = w.Write(errJSON(te))
}
