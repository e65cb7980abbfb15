package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/modelinfo"
	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// fixedProbe reports fixed memory.
type fixedProbe struct{ devices []gpu.Device }

func (p *fixedProbe) Name() string { return "nvidia" }
func (p *fixedProbe) Devices(context.Context) ([]gpu.Device, error) {
	return p.devices, nil
}
func (p *fixedProbe) Close() error { return nil }

// system is a full ctxproxy in front of a fake backend.
type system struct {
	compactor *rewrite.Compactor
	srv       *Server
	url       string
	store     *snapshots.FileStore
	writer    *snapshots.Writer
	monitor   *gpu.Monitor
	probe     *fixedProbe
}

type setup struct {
	strategy  rewrite.Config
	summarize *rewrite.SummarizeConfig // summarize and hybrid modes, over the backend
	gpu       gpu.Config
	tokens    budget.Config
	cfg       Config
	free      uint64 // bytes of GPU memory free (default 20 GiB of 24)
	// loaded are the models the backend's /api/ps lists, as the monitor
	// samples them (none by default, and no source of them).
	loaded []modelinfo.Loaded
}

func newSystem(t testing.TB, backendURL string, su setup) *system {
	t.Helper()
	log := testLogger(t)
	free := su.free
	if free == 0 {
		free = 20 << 30
	}
	probe := &fixedProbe{devices: []gpu.Device{{Vendor: "nvidia", Name: "Fake GPU", Total: 24 << 30, Used: 24<<30 - free, Free: free}}}
	opts := gpu.MonitorOptions{Logger: log}
	if su.loaded != nil {
		opts.Loaded = func(context.Context) ([]modelinfo.Loaded, error) { return su.loaded, nil }
	}
	mon := gpu.NewMonitor(probe, su.gpu, opts)
	mon.Sample(context.Background())
	scfg := snapshots.Config{Dir: t.TempDir()}
	store, err := snapshots.NewFileStore(scfg, log)
	if err != nil {
		t.Fatal(err)
	}
	writer := snapshots.NewWriter(store, scfg, log)
	var comp *rewrite.Compactor
	var extra []rewrite.Strategy
	if su.summarize != nil {
		summ := backend.NewSummarizer(backendURL, func() string { return KindOllama }, backend.SummarizerConfig{}, nil, log)
		comp = rewrite.NewCompactor(*su.summarize, summ, rewrite.CompactorOptions{Store: sessions.SummaryStore{Store: store}, Log: log})
		extra = []rewrite.Strategy{comp.Summarize(), comp.Hybrid()}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if comp != nil {
			comp.Idle(ctx)
			comp.Close()
		}
		writer.Close(ctx)
		store.Close()
	})
	trimmer, err := rewrite.NewTrimmer(su.strategy, log, extra...)
	if err != nil {
		t.Fatal(err)
	}
	cfg := su.cfg
	cfg.Backend = backendURL
	srv, err := New(cfg, Deps{Tokens: budget.NewRegistry(su.tokens, log), Trimmer: trimmer, Sizer: gpu.NewSizer(su.gpu),
		Monitor: mon, Store: store, Writer: writer}, log)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &system{srv: srv, url: ts.URL, store: store, writer: writer, monitor: mon, probe: probe, compactor: comp}
}

// flush waits until every queued session write is stored.
func (s *system) flush(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.writer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// conversation builds a chat body in the dialect's shape with n turns of
// size bytes each, ending with a user message.
func conversation(model string, n, size int, stream bool) []byte {
	msgs := []map[string]any{{"role": "system", "content": "You are a careful assistant."}}
	for i := 0; i < n; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		text := fmt.Sprintf("turn %d: ", i) + strings.Repeat(fmt.Sprintf("word%d ", i%7), size/6)
		msgs = append(msgs, map[string]any{"role": role, "content": text})
	}
	if n%2 == 0 {
		msgs = append(msgs, map[string]any{"role": "user", "content": "and now?"})
	}
	b, _ := json.Marshal(map[string]any{"model": model, "messages": msgs, "stream": stream})
	return b
}

func header(resp *http.Response, k string) int {
	n, _ := strconv.Atoi(resp.Header.Get(k))
	return n
}

// forwardedMessages decodes the messages the backend received.
func forwardedMessages(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var v struct {
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("backend got invalid JSON: %v", err)
	}
	return v.Messages
}

// TestTrimmedThroughProxy sends 500 messages far over the window through
// the proxy, in both dialects, streaming and not: the backend gets a
// trimmed, valid conversation, and the client gets the headers.
func TestTrimmedThroughProxy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		kind   fakebackend.Kind
		path   string
		model  string
		stream bool
	}{
		{"ollama", fakebackend.Ollama, "/api/chat", "llama3.1:8b", false},
		{"ollama stream", fakebackend.Ollama, "/api/chat", "llama3.1:8b", true},
		{"openai", fakebackend.OpenAI, "/v1/chat/completions", "gpt-4", false},
		{"openai stream", fakebackend.OpenAI, "/v1/chat/completions", "gpt-4", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := fakebackend.New(t, tc.kind, fakebackend.Options{})
			off := false
			sys := newSystem(t, be.URL, setup{gpu: gpu.Config{AutoSize: &off, TargetSize: 8192}})
			body := conversation(tc.model, 500, 120, tc.stream)
			resp := post(t, sys.url+tc.path, body, map[string]string{"X-Session-ID": "trim-" + tc.name})
			reply := readAll(t, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, reply)
			}
			got, _ := be.Last(tc.path)
			fwd := forwardedMessages(t, got.Body)
			if len(fwd) >= 500 || len(fwd) < 3 {
				t.Fatalf("forwarded %d messages", len(fwd))
			}
			if fwd[0]["role"] != "system" || fwd[len(fwd)-1]["content"] != "and now?" {
				t.Errorf("system or newest turn lost: first %v, last %v", fwd[0], fwd[len(fwd)-1])
			}
			before, after, limit := header(resp, "X-Ctxproxy-Tokens-Before"), header(resp, "X-Ctxproxy-Tokens"), header(resp, "X-Ctxproxy-Limit")
			dropped := header(resp, "X-Ctxproxy-Dropped")
			if before <= limit || after > limit || dropped == 0 || after == 0 {
				t.Errorf("headers: before %d after %d limit %d dropped %d", before, after, limit, dropped)
			}
			if n := resp.Header.Get("X-Ctxproxy-Notice"); !strings.Contains(n, "Context trimmed") {
				t.Errorf("notice = %q", n)
			}
			// Cut to fit: no "approaching 90%" warning for a conversation
			// far over the window; the two usages say as sent and as
			// forwarded.
			if w := resp.Header.Get("X-Ctxproxy-Warning"); w != "" {
				t.Errorf("warning = %q after a cut that fits", w)
			}
			sent, _ := strconv.ParseFloat(resp.Header.Get("X-Ctxproxy-Usage"), 64)
			fwdUse, _ := strconv.ParseFloat(resp.Header.Get("X-Ctxproxy-Usage-Forwarded"), 64)
			if sent < 100 || fwdUse <= 0 || fwdUse > 100 {
				t.Errorf("usage as sent %.1f%%, forwarded %.1f%%", sent, fwdUse)
			}
			if tc.kind == fakebackend.Ollama {
				if g := header(resp, "X-Ctxproxy-Num-Ctx"); g != 8192 {
					t.Errorf("num_ctx header = %d", g)
				}
				var opts struct {
					Options struct {
						NumCtx int `json:"num_ctx"`
					} `json:"options"`
				}
				json.Unmarshal(got.Body, &opts)
				if opts.Options.NumCtx != 8192 {
					t.Errorf("forwarded num_ctx = %d", opts.Options.NumCtx)
				}
			}
		})
	}
}

// TestNoChangeNoRewrite: a small conversation passes byte for byte, with
// the token headers set.
func TestNoChangeNoRewrite(t *testing.T) {
	be := fakebackend.New(t, fakebackend.OpenAI, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{})
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hello there"}],"temperature":0.5}`)
	resp := post(t, sys.url+"/v1/chat/completions", body, nil)
	io.Copy(io.Discard, resp.Body)
	got, _ := be.Last("/v1/chat/completions")
	if string(got.Body) != string(body) {
		t.Errorf("forwarded %s", got.Body)
	}
	if header(resp, "X-Ctxproxy-Tokens") == 0 || header(resp, "X-Ctxproxy-Limit") != 128000-16384 {
		t.Errorf("tokens %s limit %s", resp.Header.Get("X-Ctxproxy-Tokens"), resp.Header.Get("X-Ctxproxy-Limit"))
	}
	if resp.Header.Get("X-Ctxproxy-Warning") != "" || resp.Header.Get("X-Ctxproxy-Notice") != "" {
		t.Errorf("unexpected warning or notice")
	}
}

// TestNumCtxFromVRAM: an Ollama request gets a bucketed num_ctx sized from
// the (fake) GPU's free memory and the model's KV cache, stable across
// requests.
func TestNumCtxFromVRAM(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	// 4 GiB free, llama3.1 8B at f16: 128 KiB a token.
	sys := newSystem(t, be.URL, setup{free: 4 << 30})
	var first int
	for i := 0; i < 5; i++ {
		resp := post(t, sys.url+"/api/chat", conversation("llama3.1:8b", 2+2*i, 100, false), nil)
		io.Copy(io.Discard, resp.Body)
		n := header(resp, "X-Ctxproxy-Num-Ctx")
		if n == 0 || n%2048 != 0 {
			t.Fatalf("num_ctx %d is not a bucket", n)
		}
		if i == 0 {
			first = n
		} else if n != first {
			t.Errorf("num_ctx moved from %d to %d with memory unchanged", first, n)
		}
		got, _ := be.Last("/api/chat")
		if !strings.Contains(string(got.Body), fmt.Sprintf(`"num_ctx":%d`, n)) {
			t.Errorf("backend did not get num_ctx %d: %s", n, got.Body[len(got.Body)-60:])
		}
	}
	// (4 GiB − 512 MiB buffer − weights 4.6 GiB) leaves nothing: the sizer
	// falls to min_size; with 20 GiB free it is much larger.
	t.Logf("num_ctx with 4 GiB free: %d", first)
	sys2 := newSystem(t, be.URL, setup{free: 20 << 30})
	resp := post(t, sys2.url+"/api/chat", conversation("llama3.1:8b", 2, 100, false), nil)
	io.Copy(io.Discard, resp.Body)
	if n := header(resp, "X-Ctxproxy-Num-Ctx"); n <= first {
		t.Errorf("num_ctx with 20 GiB free = %d, not above %d", n, first)
	}
}

// TestClientNumCtx: a client's own num_ctx is kept when it fits.
func TestClientNumCtx(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{free: 20 << 30, cfg: Config{Planning: plan.Config{RespectClient: true}}})
	body := []byte(`{"model":"llama3.1:8b","stream":false,"options":{"num_ctx":4096},"messages":[{"role":"user","content":"hi"}]}`)
	resp := post(t, sys.url+"/api/chat", body, nil)
	io.Copy(io.Discard, resp.Body)
	got, _ := be.Last("/api/chat")
	// Kept byte for byte, with Ollama told to refuse an overflow rather
	// than cut it silently.
	want := strings.TrimSuffix(string(body), "}") + `,"truncate":false}`
	if string(got.Body) != want || header(resp, "X-Ctxproxy-Num-Ctx") != 4096 {
		t.Errorf("client num_ctx not kept: %s (header %s)", got.Body, resp.Header.Get("X-Ctxproxy-Num-Ctx"))
	}
}

// TestCalibrationThroughProxy: the backend's tokenizer is not tiktoken;
// after three responses ctxproxy's estimate is within 5% of the count the
// backend reports.
func TestCalibrationThroughProxy(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{DefaultNumCtx: 1 << 20})
	sys := newSystem(t, be.URL, setup{free: 20 << 30})
	for i := 0; i < 8; i++ {
		resp := post(t, sys.url+"/api/chat", conversation("llama3.1:8b", 4+3*i, 200+40*i, false), nil)
		var v struct {
			PromptEvalCount int `json:"prompt_eval_count"`
		}
		json.NewDecoder(resp.Body).Decode(&v)
		est := header(resp, "X-Ctxproxy-Tokens")
		e := math.Abs(float64(est-v.PromptEvalCount)) / float64(max(1, v.PromptEvalCount))
		t.Logf("request %d: estimate %d, backend %d, error %.1f%%", i+1, est, v.PromptEvalCount, e*100)
		if i >= 3 && e > 0.05 {
			t.Errorf("request %d: error %.1f%% after calibration", i+1, e*100)
		}
	}
}

// TestSilentTruncationDetected: with trimming off, Ollama cuts the prompt
// at its num_ctx and still answers 200; ctxproxy notices from
// prompt_eval_count, logs, counts and marks the session.
func TestSilentTruncationDetected(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	off := false
	sys := newSystem(t, be.URL, setup{strategy: rewrite.Config{Mode: "none", OnOverflow: "forward"},
		gpu: gpu.Config{AutoSize: &off, TargetSize: 2048}})
	resp := post(t, sys.url+"/api/chat", conversation("llama3.1:8b", 40, 300, false), map[string]string{"X-Session-ID": "cut"})
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sys.flush(t)
	if n := counterValue(t, sys.srv, "ctxproxy_backend_truncations_total"); n != 1 {
		t.Errorf("truncations metric = %v", n)
	}
	sess, err := sys.store.Get(context.Background(), "cut")
	if err != nil {
		t.Fatal(err)
	}
	if sess.Stats.Truncations != 1 || sess.Stats.LastTruncation.IsZero() {
		t.Errorf("session not marked: %+v", sess.Stats)
	}
}

// TestSessionRecorded: the conversation and the assistant's reply, taken
// from the stream as it passed, are stored under the session id.
func TestSessionRecorded(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		kind       fakebackend.Kind
		body       string
	}{
		{"ollama stream", "/api/chat", fakebackend.Ollama, `{"model":"llama3.1","messages":[{"role":"user","content":"hi"}]}`},
		{"openai stream", "/v1/chat/completions", fakebackend.OpenAI, `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := fakebackend.New(t, tc.kind, fakebackend.Options{Reply: "Hello, how can I help?"})
			sys := newSystem(t, be.URL, setup{})
			id := "team/a b ✓"
			resp := post(t, sys.url+tc.path, []byte(tc.body), map[string]string{"X-Session-ID": id})
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			sys.flush(t)
			sess, err := sys.store.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if len(sess.Messages) != 2 || sess.Messages[1].Role != "assistant" || sess.Messages[1].Content != "Hello, how can I help?" {
				t.Fatalf("stored %+v", sess.Messages)
			}
			if sess.Stats.Requests != 1 || sess.Stats.Tokens == 0 || (tc.kind == fakebackend.Ollama && sess.Stats.PromptTokens == 0) {
				t.Errorf("stats %+v", sess.Stats)
			}
		})
	}
}

// TestAccumulate: a client that sends only its new turn gets the stored
// history prepended.
func TestAccumulate(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "first answer"})
	sys := newSystem(t, be.URL, setup{})
	h := map[string]string{"X-Session-ID": "acc", "X-Ctxproxy-Accumulate": "1"}
	resp := post(t, sys.url+"/api/chat", []byte(`{"model":"llama3.1","stream":false,"messages":[{"role":"user","content":"one"}]}`), h)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sys.flush(t)
	resp = post(t, sys.url+"/api/chat", []byte(`{"model":"llama3.1","stream":false,"messages":[{"role":"user","content":"two"}]}`), h)
	io.Copy(io.Discard, resp.Body)
	got, _ := be.Last("/api/chat")
	fwd := forwardedMessages(t, got.Body)
	var roles []string
	for _, m := range fwd {
		roles = append(roles, fmt.Sprint(m["role"], ":", m["content"]))
	}
	if want := "user:one|assistant:first answer|user:two"; strings.Join(roles, "|") != want {
		t.Errorf("forwarded %q, want %q", strings.Join(roles, "|"), want)
	}
}

// TestOverflowReject: on_overflow reject answers 400
// context_length_exceeded in the dialect's shape when even the newest turn
// does not fit.
func TestOverflowReject(t *testing.T) {
	be := fakebackend.New(t, fakebackend.OpenAI, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{strategy: rewrite.Config{OnOverflow: "reject"}})
	huge := `{"model":"gpt-4","messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 8000) + `"}]}`
	resp := post(t, sys.url+"/v1/chat/completions", []byte(huge), nil)
	body := readAll(t, resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(body, `"code":"context_length_exceeded"`) {
		t.Errorf("got %d %s", resp.StatusCode, body)
	}
	if _, ok := be.Last("/v1/chat/completions"); ok {
		t.Errorf("a rejected request reached the backend")
	}
	// shrink (the default) cuts the middle out instead and forwards.
	sys2 := newSystem(t, be.URL, setup{})
	resp = post(t, sys2.url+"/v1/chat/completions", []byte(huge), nil)
	io.Copy(io.Discard, resp.Body)
	got, _ := be.Last("/v1/chat/completions")
	if resp.StatusCode != 200 || !strings.Contains(string(got.Body), "tokens cut") {
		t.Errorf("shrink: status %d, forwarded %d bytes", resp.StatusCode, len(got.Body))
	}
}

func TestUnknownStrategyHeader(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{})
	resp := post(t, sys.url+"/api/chat", conversation("llama3.1", 2, 10, false), map[string]string{"X-Ctxproxy-Strategy": "magic"})
	body := readAll(t, resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(body, "X-Ctxproxy-Strategy") {
		t.Errorf("got %d %s", resp.StatusCode, body)
	}
}

// TestOpenAIClientOnOllama: an OpenAI SDK client pointed at ctxproxy in
// front of Ollama is carried to /api/chat with num_ctx, streaming and
// not, with tools and JSON mode.
func TestOpenAIClientOnOllama(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "Bonjour!"})
	off := false
	sys := newSystem(t, be.URL, setup{gpu: gpu.Config{AutoSize: &off, TargetSize: 6144}})
	cfg := openai.DefaultConfig("unused")
	cfg.BaseURL = sys.url + "/v1"
	client := openai.NewClientWithConfig(cfg)
	ctx := context.Background()
	req := openai.ChatCompletionRequest{Model: "llama3.1:8b", Messages: []openai.ChatCompletionMessage{
		{Role: "user", Content: "Say hi in French"}}}

	checkForwarded := func(t *testing.T) {
		t.Helper()
		got, ok := be.Last("/api/chat")
		if !ok {
			t.Fatal("nothing reached /api/chat")
		}
		if !strings.Contains(string(got.Body), `"num_ctx":6144`) {
			t.Errorf("num_ctx not set: %s", got.Body)
		}
	}
	t.Run("chat", func(t *testing.T) {
		resp, err := client.CreateChatCompletion(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Choices[0].Message.Content != "Bonjour!" || resp.Usage.PromptTokens == 0 || resp.Object != "chat.completion" {
			t.Errorf("response %+v", resp)
		}
		if g := resp.Header().Get("X-Ctxproxy-Num-Ctx"); g != "6144" {
			t.Errorf("X-Ctxproxy-Num-Ctx = %q", g)
		}
		checkForwarded(t)
	})
	t.Run("stream", func(t *testing.T) {
		sreq := req
		sreq.Stream = true
		sreq.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
		st, err := client.CreateChatCompletionStream(ctx, sreq)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var sb strings.Builder
		usage := false
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
			usage = usage || c.Usage != nil
		}
		if sb.String() != "Bonjour!" || !usage {
			t.Errorf("streamed %q, usage %v", sb.String(), usage)
		}
		checkForwarded(t)
	})
	t.Run("tools", func(t *testing.T) {
		be.SetOptions(fakebackend.Options{ToolCalls: []fakebackend.ToolCall{{Name: "get_weather", Arguments: map[string]any{"city": "Paris"}}}})
		defer be.SetOptions(fakebackend.Options{Reply: "Bonjour!"})
		treq := req
		treq.Tools = []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}}}
		resp, err := client.CreateChatCompletion(ctx, treq)
		if err != nil {
			t.Fatal(err)
		}
		tc := resp.Choices[0].Message.ToolCalls
		if len(tc) != 1 || tc[0].Function.Name != "get_weather" || tc[0].Function.Arguments != `{"city":"Paris"}` ||
			resp.Choices[0].FinishReason != openai.FinishReasonToolCalls {
			t.Errorf("tool calls %+v, finish %q", tc, resp.Choices[0].FinishReason)
		}
		got, _ := be.Last("/api/chat")
		if !strings.Contains(string(got.Body), `"tools":[`) {
			t.Errorf("tools not forwarded: %s", got.Body)
		}
	})
	t.Run("json mode", func(t *testing.T) {
		jreq := req
		jreq.ResponseFormat = &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject}
		if _, err := client.CreateChatCompletion(ctx, jreq); err != nil {
			t.Fatal(err)
		}
		got, _ := be.Last("/api/chat")
		if !strings.Contains(string(got.Body), `"format":"json"`) {
			t.Errorf("format not forwarded: %s", got.Body)
		}
	})
	t.Run("backend error", func(t *testing.T) {
		be.SetOptions(fakebackend.Options{Status: 404, ErrorMessage: `model "nope" not found, try pulling it first`})
		defer be.SetOptions(fakebackend.Options{Reply: "Bonjour!"})
		_, err := client.CreateChatCompletion(ctx, req)
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 404 || !strings.Contains(apiErr.Message, "not found") {
			t.Errorf("err = %v", err)
		}
	})
}

// TestMemoryGuardEmergency: at 95% of GPU memory used the guard snapshots
// and clears the active sessions, and the next response says how to
// restore.
func TestMemoryGuardEmergency(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{})
	h := map[string]string{"X-Session-ID": "busy"}
	resp := post(t, sys.url+"/api/chat", conversation("llama3.1:8b", 4, 50, false), h)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sys.flush(t)

	sys.probe.devices = []gpu.Device{{Vendor: "nvidia", Name: "Fake GPU", Total: 24 << 30, Used: 23.5 * (1 << 30), Free: 0.5 * (1 << 30)}}
	sys.monitor.Sample(context.Background())
	var snaps []adminapi.SnapshotInfo
	for i := 0; i < 100; i++ {
		snaps, _ = sys.store.ListSnapshots(context.Background(), "busy")
		if len(snaps) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(snaps) != 1 || snaps[0].Reason != snapshots.ReasonEmergency {
		t.Fatalf("snapshots %+v", snaps)
	}
	// The guard saves the snapshot, clears, then remembers the snapshot
	// for the session's next response: wait for all three.
	var sess *snapshots.Session
	for i := 0; i < 100; i++ {
		sys.flush(t)
		sess, _ = sys.store.Get(context.Background(), "busy")
		if sess != nil && len(sess.Messages) == 0 && sys.srv.sessions.Cleared.Has("busy") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if sess == nil || len(sess.Messages) != 0 {
		t.Errorf("session not cleared: %+v", sess)
	}
	resp = post(t, sys.url+"/api/chat", conversation("llama3.1:8b", 2, 50, false), h)
	io.Copy(io.Discard, resp.Body)
	if w := strings.Join(resp.Header.Values("X-Ctxproxy-Warning"), " | "); !strings.Contains(w, "ctxproxy context restore "+snaps[0].ID) {
		t.Errorf("warning = %q", w)
	}
}

func counterValue(t *testing.T, s *Server, name string) float64 {
	t.Helper()
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			total := 0.0
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
			return total
		}
	}
	return 0
}

// TestInbandClearHoldsForFullHistoryClients: a chat UI sends "/clear",
// gets ctxproxy's answer, and keeps resending its whole history; the model
// sees only what came after the clear.
func TestInbandClearHoldsForFullHistoryClients(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "model says"})
	sys := newSystem(t, be.URL, setup{cfg: Config{Planning: plan.Config{Inband: true}}})
	h := map[string]string{"X-Session-ID": "webui"}
	turn := func(msgs string) string {
		resp := post(t, sys.url+"/api/chat", []byte(`{"model":"llama3.1","stream":false,"messages":[`+msgs+`]}`), h)
		var v struct {
			Message struct{ Content string } `json:"message"`
		}
		json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		sys.flush(t)
		return v.Message.Content
	}
	turn(`{"role":"system","content":"S"},{"role":"user","content":"old question"}`)
	answer := turn(`{"role":"system","content":"S"},{"role":"user","content":"old question"},{"role":"assistant","content":"model says"},{"role":"user","content":"/clear"}`)
	if !strings.HasPrefix(answer, "Context cleared.") {
		t.Fatalf("in-band answer %q", answer)
	}
	ans, _ := json.Marshal(answer)
	turn(`{"role":"system","content":"S"},{"role":"user","content":"old question"},{"role":"assistant","content":"model says"},` +
		`{"role":"user","content":"/clear"},{"role":"assistant","content":` + string(ans) + `},{"role":"user","content":"new question"}`)
	got, _ := be.Last("/api/chat")
	var roles []string
	for _, m := range forwardedMessages(t, got.Body) {
		roles = append(roles, fmt.Sprint(m["role"], ":", m["content"]))
	}
	if want := "system:S|user:new question"; strings.Join(roles, "|") != want {
		t.Errorf("forwarded %q, want %q", strings.Join(roles, "|"), want)
	}
	sess, _ := sys.store.Get(context.Background(), "webui")
	if len(sess.Messages) != 3 {
		t.Errorf("stored %d messages after the clear, want system, question and answer", len(sess.Messages))
	}
}

// TestLoadRequestKeepsSession: a request with no messages loads or
// unloads the model (Ollama answers done_reason "load"/"unload"); a client
// that sends its session header on every request must not find its
// conversation replaced by that empty exchange.
func TestLoadRequestKeepsSession(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "Hello"})
	sys := newSystem(t, be.URL, setup{})
	h := map[string]string{"X-Session-ID": "keep"}
	for _, body := range []string{
		`{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"llama3.1:8b","messages":[]}`,
		`{"model":"llama3.1:8b","messages":[],"keep_alive":0}`,
	} {
		resp := post(t, sys.url+"/api/chat", []byte(body), h)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	sys.flush(t)
	sess, err := sys.store.Get(context.Background(), "keep")
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Messages) != 2 || sess.Messages[0].Content != "hi" {
		t.Errorf("stored %d messages: %+v", len(sess.Messages), sess.Messages)
	}
}

// TestStrategyHeader: X-Ctxproxy-Strategy picks this request's strategy.
func TestStrategyHeader(t *testing.T) {
	be := fakebackend.New(t, fakebackend.OpenAI, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{strategy: rewrite.Config{OnOverflow: "forward"}})
	body := conversation("gpt-4", 60, 200, false)
	for _, tc := range []struct {
		mode        string
		wantDropped bool
	}{{"", true}, {"none", false}, {"sliding_window", true}} {
		resp := post(t, sys.url+"/v1/chat/completions", body, map[string]string{"X-Ctxproxy-Strategy": tc.mode})
		io.Copy(io.Discard, resp.Body)
		if got := header(resp, "X-Ctxproxy-Dropped") > 0; got != tc.wantDropped {
			t.Errorf("strategy %q: dropped %s", tc.mode, resp.Header.Get("X-Ctxproxy-Dropped"))
		}
	}
}
