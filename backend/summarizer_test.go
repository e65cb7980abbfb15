package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/google/go-cmp/cmp"
)

func summKindOf(k fakebackend.Kind) func() string {
	return func() string {
		if k == fakebackend.OpenAI {
			return "openai"
		}
		return "ollama"
	}
}

func summRequest() rewrite.SummaryRequest {
	return rewrite.SummaryRequest{
		Model: "llama3.1", MaxTokens: 64, NumCtx: 8192, Auth: "Bearer sk-test",
		Previous: "The user is fixing the build.",
		Messages: []rewrite.Message{
			{Role: "user", Content: "Why does main.go fail?"},
			{Role: "assistant", Content: "Line 12 uses an undefined name."},
		},
	}
}

// summChatBody is what the tests read of a summarizer call.
type summChatBody struct {
	Model    string `json:"model"`
	Stream   *bool  `json:"stream"`
	Think    *bool  `json:"think"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Options   map[string]any `json:"options"`
	MaxTokens int            `json:"max_tokens"`
}

func TestSummarizerDialects(t *testing.T) {
	tests := []struct {
		name string
		kind fakebackend.Kind
		path string
		auth string
		// check looks at the body the backend got.
		check func(t *testing.T, b summChatBody)
	}{
		{"ollama", fakebackend.Ollama, "/api/chat", "Bearer sk-test", func(t *testing.T, b summChatBody) {
			if b.Stream == nil || *b.Stream || b.Think == nil || *b.Think {
				t.Errorf("stream %v, think %v; want both false", b.Stream, b.Think)
			}
			want := map[string]any{"num_predict": 64.0, "num_ctx": 8192.0}
			if diff := cmp.Diff(want, b.Options); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		}},
		{"openai", fakebackend.OpenAI, "/v1/chat/completions", "Bearer sk-test", func(t *testing.T, b summChatBody) {
			if b.MaxTokens != 64 || b.Stream != nil && *b.Stream {
				t.Errorf("max_tokens %d, stream %v", b.MaxTokens, b.Stream)
			}
		}},
		{"openai, another scheme", fakebackend.OpenAI, "/v1/chat/completions", "Basic dXNlcjpwYXNz", nil},
		{"openai, no key", fakebackend.OpenAI, "/v1/chat/completions", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := fakebackend.New(t, tt.kind, fakebackend.Options{Reply: "The user asked why main.go fails.\nLine 12 is wrong."})
			s := NewSummarizer(b.URL+"/", summKindOf(tt.kind), SummarizerConfig{}, b.Client(), nil)
			req := summRequest()
			req.Auth = tt.auth
			got, err := s.Summarize(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if want := "The user asked why main.go fails. Line 12 is wrong."; got != want {
				t.Errorf("summary %q, want %q", got, want)
			}
			r, ok := b.Last(tt.path)
			if !ok {
				t.Fatalf("no request on %s: %v", tt.path, b.Requests())
			}
			if g := r.Header.Get("Authorization"); g != tt.auth {
				t.Errorf("Authorization %q, want %q", g, tt.auth)
			}
			var body summChatBody
			if err := json.Unmarshal(r.Body, &body); err != nil {
				t.Fatal(err)
			}
			system, user := req.Prompt()
			if body.Model != "llama3.1" || len(body.Messages) != 2 ||
				body.Messages[0].Content != system || body.Messages[1].Content != user {
				t.Errorf("model %q, messages %+v", body.Model, body.Messages)
			}
			if tt.check != nil {
				tt.check(t, body)
			}
		})
	}
}

func TestSummarizerModel(t *testing.T) {
	b := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "Summary."})
	for _, tt := range []struct{ configured, requested, want string }{
		{"", "llama3.1", "llama3.1"},
		{"qwen3:0.6b", "llama3.1", "qwen3:0.6b"},
		{"qwen3:0.6b", "", "qwen3:0.6b"},
	} {
		s := NewSummarizer(b.URL, nil, SummarizerConfig{Model: tt.configured}, b.Client(), nil)
		req := summRequest()
		req.Model = tt.requested
		if _, err := s.Summarize(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		r, _ := b.Last("/api/chat")
		var body summChatBody
		json.Unmarshal(r.Body, &body)
		if body.Model != tt.want {
			t.Errorf("summarize.model %q, request %q: called %q, want %q", tt.configured, tt.requested, body.Model, tt.want)
		}
	}
	s := NewSummarizer(b.URL, nil, SummarizerConfig{}, b.Client(), nil)
	req := summRequest()
	req.Model = ""
	if _, err := s.Summarize(context.Background(), req); err == nil {
		t.Error("no model, no error")
	}
}

// TestSummarizerFaults: each fault is an error the strategy counts and
// trims around; an oversized answer is cut to max_tokens.
func TestSummarizerFaults(t *testing.T) {
	oversized := strings.Repeat("The user asked about the build and the tests. ", 100)
	for _, kind := range []fakebackend.Kind{fakebackend.Ollama, fakebackend.OpenAI} {
		tests := []struct {
			name    string
			opts    fakebackend.Options
			down    bool
			wantErr string // substring; "" for success
			is      error
		}{
			{"empty", fakebackend.Options{ReplyFunc: func([]byte) string { return "" }}, false, "empty summary", rewrite.ErrEmptySummary},
			{"thinking only", fakebackend.Options{ReplyFunc: func([]byte) string { return "<think>…</think>" }}, false, "empty summary", rewrite.ErrEmptySummary},
			{"error status", fakebackend.Options{Status: 500, ErrorMessage: "model failed to load"}, false, "model failed to load", nil},
			{"not found", fakebackend.Options{Status: 404, ErrorMessage: `model "llama3.1" not found`}, false, "not found", nil},
			{"timeout", fakebackend.Options{Stall: make(chan struct{})}, false, "timed out", context.DeadlineExceeded},
			{"backend down", fakebackend.Options{}, true, "summarize with llama3.1", nil},
			{"oversized", fakebackend.Options{Reply: oversized}, false, "", nil},
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/%s", summKindOf(kind)(), tt.name), func(t *testing.T) {
				b := fakebackend.New(t, kind, tt.opts)
				if tt.down {
					b.Close()
				}
				timeout := time.Minute
				if tt.opts.Stall != nil {
					timeout = 50 * time.Millisecond
				}
				s := NewSummarizer(b.URL, summKindOf(kind), SummarizerConfig{Timeout: timeout}, &http.Client{}, nil)
				got, err := s.Summarize(context.Background(), summRequest())
				if tt.wantErr == "" {
					if err != nil {
						t.Fatal(err)
					}
					if len(got) > 64*4+len("…") || !strings.HasSuffix(got, ".") {
						t.Errorf("oversized answer kept at %d bytes: %q", len(got), got)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Errorf("error %v is not %v", err, tt.is)
				}
				if strings.Contains(err.Error(), "sk-test") {
					t.Error("the key leaked into an error")
				}
			})
		}
	}
}

var summQuestion = regexp.MustCompile(`user: (question \d+)`)

// TestSummarizerReplay replays a 200-turn conversation, the whole history
// each time, through the summarize mode with this Summarizer against the
// fake Ollama: every summary is one backend call, each iteration is
// summarized once, no request waits for one, and the summaries reach the
// model in the system prompt.
func TestSummarizerReplay(t *testing.T) {
	b := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{ReplyFunc: func(body []byte) string {
		m := summQuestion.FindSubmatch(body)
		if m == nil {
			return "Nothing."
		}
		return "The user asked " + string(m[1]) + "."
	}})
	s := NewSummarizer(b.URL, nil, SummarizerConfig{}, b.Client(), nil)
	c := rewrite.NewCompactor(rewrite.SummarizeConfig{Wait: time.Minute}, s, rewrite.CompactorOptions{})
	t.Cleanup(func() { c.Close() })
	tr, err := rewrite.NewTrimmer(rewrite.Config{Mode: "summarize"}, nil, c.Summarize())
	if err != nil {
		t.Fatal(err)
	}
	req := rewrite.Request{Session: "replay", Model: "llama3.1", NumCtx: 8192}
	history := []rewrite.Message{{Role: "system", Content: "You are terse."}}
	const limit = 6000
	summarized, folded := 0, 0
	for i := range 200 {
		msgs := append(history, rewrite.Message{Role: "user", Content: fmt.Sprintf("question %d %s", i, strings.Repeat("lorem ipsum ", 30+i%40))})
		res, err := tr.Trim(t.Context(), req, msgs, limit, summCounter{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Summarized > 0 {
			summarized++
			folded = res.Summarized / 2 // iterations of a question and an answer
			if !strings.Contains(res.Messages[0].Content, "<conversation_summary>\n") ||
				!strings.Contains(res.Messages[0].Content, "- The user asked question ") {
				t.Fatalf("turn %d: no summaries in the system prompt:\n%s", i, res.Messages[0].Content)
			}
		}
		history = append(msgs, rewrite.Message{Role: "assistant", Content: "answer " + strings.Repeat("dolor sit ", 40)})
		c.Idle(t.Context()) // the user reads the answer
	}
	calls := 0
	for _, r := range b.Requests() {
		if r.Path == "/api/chat" {
			calls++
			var body summChatBody
			json.Unmarshal(r.Body, &body)
			if body.Options["num_ctx"] != 8192.0 {
				t.Errorf("summary call with num_ctx %v: the model would reload", body.Options["num_ctx"])
			}
		}
	}
	st := c.Stats()
	t.Logf("200 turns against the fake Ollama: %d requests summarized, %d iterations folded in the last; "+
		"%d summary calls to the backend, %d failed; %d requests waited",
		summarized, folded, calls, st.Failures, st.Waited)
	// The summarizer is the chat's model on the chat's backend: each cut
	// writes its summaries when it is reached, a batch a call, and waits
	// for them; none is trimmed for want of one.
	if uint64(calls) != st.Calls || calls > folded || st.Failures != 0 || st.Fallbacks != 0 || summarized < 150 {
		t.Errorf("backend calls %d, stats %+v, summarized %d", calls, st, summarized)
	}
}

// summCounter counts 4 bytes a token and 4 tokens a message.
type summCounter struct{}

func (summCounter) CountText(s string) int { return (len(s) + 3) / 4 }

func (c summCounter) CountMessage(m *rewrite.Message) int { return 4 + c.CountText(m.Content) }

// TestSummarizerReasoningModel: go-openai refuses max_tokens for o-series
// and gpt-5 models; the call goes again with max_completion_tokens.
func TestSummarizerReasoningModel(t *testing.T) {
	b := fakebackend.New(t, fakebackend.OpenAI, fakebackend.Options{Reply: "Summary."})
	s := NewSummarizer(b.URL, summKindOf(fakebackend.OpenAI), SummarizerConfig{Model: "o3-mini"}, b.Client(), nil)
	if _, err := s.Summarize(context.Background(), summRequest()); err != nil {
		t.Fatal(err)
	}
	r, _ := b.Last("/v1/chat/completions")
	var body map[string]any
	json.Unmarshal(r.Body, &body)
	if body["max_completion_tokens"] != 64.0 || body["max_tokens"] != nil {
		t.Errorf("max_completion_tokens %v, max_tokens %v", body["max_completion_tokens"], body["max_tokens"])
	}
}

// TestSummarizerGetsTheClientsKey: the Authorization header of the chat
// request, carried in rewrite.Request, authorizes the summary calls.
func TestSummarizerGetsTheClientsKey(t *testing.T) {
	b := fakebackend.New(t, fakebackend.OpenAI, fakebackend.Options{Reply: "Summary."})
	s := NewSummarizer(b.URL, summKindOf(fakebackend.OpenAI), SummarizerConfig{}, b.Client(), nil)
	c := rewrite.NewCompactor(rewrite.SummarizeConfig{KeepRecent: 1}, s, rewrite.CompactorOptions{})
	t.Cleanup(func() { c.Close() })
	req := rewrite.Request{Session: "k", Model: "gpt-4o", Auth: "Bearer sk-client"}
	var msgs []rewrite.Message
	for i := range 4 {
		msgs = append(msgs, rewrite.Message{Role: "user", Content: fmt.Sprint("q", i)}, rewrite.Message{Role: "assistant", Content: "a"})
	}
	got, err := c.Compact(t.Context(), req, msgs, summCounter{})
	if err != nil || got.Summaries == 0 || got.Folded != 6 {
		t.Fatalf("%v, %d summaries", err, got.Summaries)
	}
	for _, r := range b.Requests() {
		if g := r.Header.Get("Authorization"); g != "Bearer sk-client" {
			t.Errorf("summary call with Authorization %q", g)
		}
	}
}

// A summarizer on a backend of its own (summarize.backend) never sends it
// the clients' credentials, which are for the proxy's backend: it sends
// its own key, or none.
func TestSummarizerOwnBackendKeepsClientsKeys(t *testing.T) {
	for _, kind := range []fakebackend.Kind{fakebackend.Ollama, fakebackend.OpenAI} {
		for _, own := range []string{"Bearer sk-summarizer", ""} {
			b := fakebackend.New(t, kind, fakebackend.Options{Reply: "A summary."})
			s := NewSummarizer(b.URL, summKindOf(kind), SummarizerConfig{OwnBackend: true, Auth: own}, b.Client(), nil)
			req := summRequest()
			req.Auth = "Bearer sk-client"
			if _, err := s.Summarize(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			reqs := b.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests", len(reqs))
			}
			if g := reqs[0].Header.Get("Authorization"); g != own {
				t.Errorf("%v backend of its own got Authorization %q, want %q", kind, g, own)
			}
		}
	}
}
