package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	ollama "github.com/ollama/ollama/api"
	openai "github.com/sashabaranov/go-openai"

	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy/admin"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// headerTransport adds headers to every request, as a client configured
// with a session header does.
type headerTransport struct{ header map[string]string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.header {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// inbandClient sends one user message with a real client library and
// returns the assistant's text.
type inbandClient func(t *testing.T, text string) string

func ollamaClient(base, session string, stream bool) inbandClient {
	u, _ := url.Parse(base)
	c := ollama.NewClient(u, &http.Client{Transport: headerTransport{map[string]string{"X-Session-ID": session}}})
	return func(t *testing.T, text string) string {
		t.Helper()
		var sb strings.Builder
		var final ollama.ChatResponse
		chunks := 0
		err := c.Chat(context.Background(), &ollama.ChatRequest{Model: tinyModel, Stream: &stream,
			Messages: []ollama.Message{{Role: "user", Content: text}}}, func(r ollama.ChatResponse) error {
			chunks++
			sb.WriteString(r.Message.Content)
			final = r
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if !final.Done || final.DoneReason != "stop" || final.Message.Role != "assistant" || final.Model != tinyModel {
			t.Errorf("%s: last chunk %+v", text, final)
		}
		if stream && chunks != 2 || !stream && chunks != 1 {
			t.Errorf("%s: %d chunks (stream %v)", text, chunks, stream)
		}
		return sb.String()
	}
}

func openaiClient(base, session string, stream bool) inbandClient {
	cfg := openai.DefaultConfig("sk-test")
	cfg.BaseURL = base + "/v1"
	cfg.HTTPClient = &http.Client{Transport: headerTransport{map[string]string{"X-Session-ID": session}}}
	c := openai.NewClientWithConfig(cfg)
	return func(t *testing.T, text string) string {
		t.Helper()
		req := openai.ChatCompletionRequest{Model: tinyModel,
			Messages: []openai.ChatCompletionMessage{{Role: "user", Content: text}}}
		if !stream {
			resp, err := c.CreateChatCompletion(context.Background(), req)
			if err != nil {
				t.Fatalf("%s: %v", text, err)
			}
			if len(resp.Choices) != 1 || resp.Choices[0].FinishReason != "stop" || resp.Object != "chat.completion" {
				t.Errorf("%s: %+v", text, resp)
			}
			return resp.Choices[0].Message.Content
		}
		req.Stream = true
		req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
		s, err := c.CreateChatCompletionStream(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		defer s.Close()
		var sb strings.Builder
		finish, usage := "", false
		for {
			chunk, err := s.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", text, err)
			}
			for _, ch := range chunk.Choices {
				sb.WriteString(ch.Delta.Content)
				if ch.FinishReason != "" {
					finish = string(ch.FinishReason)
				}
			}
			usage = usage || chunk.Usage != nil
		}
		if finish != "stop" || !usage {
			t.Errorf("%s: finish reason %q, usage chunk %v", text, finish, usage)
		}
		return sb.String()
	}
}

// TestInbandContextCommands runs every command in-band through
// the Ollama and OpenAI client libraries, streamed and not: each answers
// the same text, and the backend is never called.
func TestInbandContextCommands(t *testing.T) {
	e := newAdminEnv(t, "", func(c *Config, _ *Deps) { c.Planning.Inband = true })
	e.srv.status.Note(admin.ModelSeen{Name: tinyModel, NumCtx: 4096, Reason: "4096 tokens fit", Limit: 1900, Facts: mustFacts(t),
		Counting: "estimate"})
	for _, mode := range []struct {
		name   string
		client func(base, session string, stream bool) inbandClient
		stream bool
	}{
		{"ollama", ollamaClient, false},
		{"ollama-stream", ollamaClient, true},
		{"openai", openaiClient, false},
		{"openai-stream", openaiClient, true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			session := "inband/" + mode.name
			send := mode.client(e.ts.URL, session, mode.stream)
			p := sessionPath(session)
			e.json("PUT", p, map[string]any{"model": tinyModel, "metadata": map[string]any{"agent": "test"}}, 200)
			msgs := []any{map[string]any{"role": "system", "content": "Be brief."}}
			for i := range 29 {
				role := []string{"user", "assistant"}[i%2]
				msgs = append(msgs, map[string]any{"role": role, "content": fmt.Sprintf("turn %d %s", i, strings.Repeat("word ", 40))})
			}
			e.json("POST", p+"/messages", map[string]any{"messages": msgs}, 200)

			var transcript strings.Builder
			say := func(cmd string) string {
				answer := send(t, cmd)
				fmt.Fprintf(&transcript, "> %s\n%s\n\n", cmd, answer)
				return answer
			}
			say("/context")
			say("/stats")
			say("/context stats")
			say("/context list")
			saved := say("/context snapshot")
			say("/context list")
			say("/context compress")
			say("/context compress")
			snap := regexp.MustCompile(`\d{8}-\d{6}-[0-9a-f]{6}`).FindString(saved)
			say("/context restore " + snap)
			say("/context restore")
			say("/context restore 20990101-000000-abcdef")
			say("/context size 8192")
			say("/context size lots")
			say("/context size 100")
			say("/context auto")
			say("/context clear")
			say("/context")
			say("/clear")
			say("/stats")
			say("/context help")
			got := regexp.MustCompile(`(?m)  \d+(\.\d)? (B|KiB)$`).ReplaceAllString(stable(transcript.String()), "  SIZE")
			golden(t, "inband.txt", strings.ReplaceAll(got, session, "SESSION"))

			if reqs := chatRequests(e); reqs != 0 {
				t.Errorf("the backend got %d chat requests", reqs)
			}
		})
	}
}

func chatRequests(e *adminEnv) int {
	n := 0
	for _, r := range e.be.Requests() {
		if strings.Contains(r.Path, "chat") {
			n++
		}
	}
	return n
}

// TestInbandOffAndNonCommands: with commands.inband off, or for a message
// that is not exactly a command, the model answers.
func TestInbandOffAndNonCommands(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inband bool
		text   string
	}{
		{"off", false, "/context"},
		{"off clear", false, "/clear"},
		{"sentence", true, "/context please summarize"},
		{"too many arguments", true, "/context size 1 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newAdminEnv(t, "", func(c *Config, _ *Deps) { c.Planning.Inband = tc.inband })
			if got := ollamaClient(e.ts.URL, "s", false)(t, tc.text); got != "Hello from the model." {
				t.Errorf("answer %q, want the model's", got)
			}
			if n := chatRequests(e); n != 1 {
				t.Errorf("backend chat requests: %d", n)
			}
		})
	}
}

// TestInbandWithoutSession: session commands need a session; the status
// works without one.
func TestInbandWithoutSession(t *testing.T) {
	e := newAdminEnv(t, "", func(c *Config, _ *Deps) { c.Planning.Inband = true; c.NoFingerprint = true })
	body := func(text string) []byte {
		b, _ := json.Marshal(map[string]any{"model": "m", "stream": false,
			"messages": []any{map[string]string{"role": "user", "content": text}}})
		return b
	}
	answer := func(text string) string {
		_, data := e.doHeader("POST", "/api/chat", body(text), nil)
		var v struct {
			Message struct{ Content string } `json:"message"`
		}
		_ = json.Unmarshal(data, &v)
		return v.Message.Content
	}
	if got := answer("/context list"); !strings.Contains(got, "no session") {
		t.Errorf("/context list without a session: %q", got)
	}
	if got := answer("/context"); !strings.Contains(got, "VRAM") || strings.Contains(got, "Session") {
		t.Errorf("/context without a session: %q", got)
	}
}

// TestInbandSizeRefusedWhenAdminOff: a chat user cannot change everyone's
// context size on a proxy whose admin API is off.
func TestInbandSizeRefusedWhenAdminOff(t *testing.T) {
	e := newAdminEnv(t, "", func(c *Config, _ *Deps) { c.Planning.Inband = true; c.AdminOff = true })
	got := ollamaClient(e.ts.URL, "s", false)(t, "/context size 4096")
	if !strings.Contains(got, "admin API is off") {
		t.Errorf("answer: %q", got)
	}
	if auto, _ := e.srv.sizer.Mode(); !auto {
		t.Error("the size changed")
	}
}

// TestInbandRefusesCrossSite: a page on another site posting "/clear" to
// the chat route does not run the command; the request goes to the model.
func TestInbandRefusesCrossSite(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "from the model"})
	_, px := newProxy(t, be.URL, Config{Planning: plan.Config{Inband: true}})
	body := []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"/clear"}]}`)
	resp := post(t, px.URL+"/api/chat", body, map[string]string{"Sec-Fetch-Site": "cross-site", "X-Session-ID": "s"})
	if got := readAll(t, resp.Body); !strings.Contains(got, "from the model") {
		t.Errorf("a cross-site in-band command was run: %s", got)
	}
}
