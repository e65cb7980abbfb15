//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
)

// recorder is a reverse proxy that keeps every exchange crossing it: the
// request as sent and the answer as the client got it, streams included.
// Put between a client and ctxproxy, or ctxproxy and Ollama, it shows what
// each side saw without changing a byte.
type recorder struct {
	url     string
	mu      sync.Mutex
	ex      []recorded
	started int // requests that arrived; len(ex) of them have ended
}

// recorded is one exchange through a recorder.
type recorded struct {
	Method, Path, Query string
	ReqHeader           http.Header
	Req                 []byte
	Status              int
	RespHeader          http.Header
	Resp                []byte
}

// startRecorder starts a recorder in front of target; it stops when the
// test ends.
func startRecorder(t *testing.T, target string) *recorder {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // streams pass as they come
	rp.ModifyResponse = func(resp *http.Response) error {
		x := resp.Request.Context().Value(recordKey{}).(*recorded)
		x.Status, x.RespHeader = resp.StatusCode, resp.Header.Clone()
		resp.Body = &teeBody{ReadCloser: resp.Body, done: func(b []byte) { x.Resp = b; rec.add(*x) }}
		return nil
	}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		x := r.Context().Value(recordKey{}).(*recorded)
		x.Status, x.Resp = http.StatusBadGateway, []byte(err.Error())
		rec.add(*x)
		w.WriteHeader(http.StatusBadGateway)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.started++
		rec.mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		x := &recorded{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, ReqHeader: r.Header.Clone(), Req: body}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), recordKey{}, x)))
	}))
	t.Cleanup(srv.Close)
	rec.url = srv.URL
	return rec
}

type recordKey struct{}

func (r *recorder) add(x recorded) {
	r.mu.Lock()
	r.ex = append(r.ex, x)
	r.mu.Unlock()
}

// busy reports whether a request that arrived has not ended yet.
func (r *recorder) busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started > len(r.ex)
}

// all returns the exchanges so far, in the order they ended.
func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ex)
}

// chats returns the exchanges on the chat routes.
func (r *recorder) chats() []recorded {
	var out []recorded
	for _, x := range r.all() {
		if x.Method == http.MethodPost && isChatRoute(x.Path) {
			out = append(out, x)
		}
	}
	return out
}

func isChatRoute(path string) bool {
	switch path {
	case "/api/chat", "/v1/chat/completions", "/v1/responses", "/v1/messages":
		return true
	}
	return false
}

// teeBody keeps what is read through it and hands it over at the end.
type teeBody struct {
	io.ReadCloser
	buf  bytes.Buffer
	once sync.Once
	done func([]byte)
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.buf.Write(p[:n])
	if err != nil {
		b.once.Do(func() { b.done(b.buf.Bytes()) })
	}
	return n, err
}

func (b *teeBody) Close() error {
	b.once.Do(func() { b.done(b.buf.Bytes()) })
	return b.ReadCloser.Close()
}

// promptTokens is the prompt's size as the server's answer reports it,
// in each dialect: prompt_eval_count (Ollama), usage.prompt_tokens (chat
// completions), usage.input_tokens (Responses, and Anthropic's
// message_delta, where Ollama puts its own count). ok is false when the
// answer says none.
func (x recorded) promptTokens() (n int, ok bool) {
	var last struct {
		PromptEvalCount *int `json:"prompt_eval_count"`
		Usage           *struct {
			PromptTokens *int `json:"prompt_tokens"`
			InputTokens  *int `json:"input_tokens"`
		} `json:"usage"`
		Response *struct {
			Usage *struct {
				InputTokens *int `json:"input_tokens"`
			} `json:"usage"`
		} `json:"response"`
	}
	sc := bufio.NewScanner(bytes.NewReader(x.Resp))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		line = bytes.TrimPrefix(line, []byte("data: "))
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		if json.Unmarshal(line, &last) != nil {
			continue
		}
		switch {
		case last.PromptEvalCount != nil:
			n, ok = *last.PromptEvalCount, true
		case last.Usage != nil && last.Usage.PromptTokens != nil:
			n, ok = *last.Usage.PromptTokens, true
		case last.Usage != nil && last.Usage.InputTokens != nil && !strings.Contains(string(line), `"message_start"`):
			n, ok = *last.Usage.InputTokens, true
		case last.Response != nil && last.Response.Usage != nil && last.Response.Usage.InputTokens != nil:
			n, ok = *last.Response.Usage.InputTokens, true
		}
		last.PromptEvalCount, last.Usage, last.Response = nil, nil, nil
	}
	return n, ok
}
