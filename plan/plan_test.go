package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/internal/logonce"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// newPlanner is a planner in front of a fake Ollama, whose model "small"
// has a window of window tokens, counted by estimate.
func newPlanner(t *testing.T, window int) *Planner {
	t.Helper()
	fake := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	u, err := url.Parse(fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	be := backend.New(backend.Config{URL: u, Kind: backend.KindOllama, Client: &http.Client{}, Log: log})
	tokens := budget.NewRegistry(budget.Config{Encoding: tokenizer.EncodingApproximate,
		Models: map[string]budget.Model{"small": {MaxTokens: window, MaxOutputTokens: 64}}}, log)
	tr, err := rewrite.NewTrimmer(rewrite.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var trimmer atomic.Pointer[rewrite.Trimmer]
	trimmer.Store(tr)
	return New(Config{NoExact: true}, Deps{Backend: be, Tokens: tokens, Trimmer: &trimmer, Once: logonce.New(log), Log: log})
}

// chatOf is a chat request to model "small" of a system prompt and n
// turns of about 60 tokens each.
func chatOf(t *testing.T, n int) *wire.Request {
	t.Helper()
	msgs := []map[string]string{{"role": "system", "content": "Be brief."}}
	for i := range n {
		role := []string{"user", "assistant"}[i%2]
		msgs = append(msgs, map[string]string{"role": role, "content": fmt.Sprintf("turn %d: %s", i, strings.Repeat("word ", 50))})
	}
	msgs = append(msgs, map[string]string{"role": "user", "content": "and now?"})
	body, err := json.Marshal(map[string]any{"model": "small", "messages": msgs, "stream": false})
	if err != nil {
		t.Fatal(err)
	}
	req, err := wire.DecodeChat(wire.Ollama, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// A plan is a value: cutting it returns a new one and leaves it as it
// was, so a harder cut starts from the same conversation.
func TestCutReturnsANewPlan(t *testing.T) {
	pl := newPlanner(t, 1024)
	ctx := context.Background()
	req := chatOf(t, 40)
	prepared, aerr := pl.Prepare(ctx, Chat(req), Options{})
	if aerr != nil {
		t.Fatal(aerr.Message)
	}
	if prepared.Before.Tokens <= prepared.Limit {
		t.Fatalf("the conversation (%d tokens) fits its limit (%d): nothing to cut", prepared.Before.Tokens, prepared.Limit)
	}
	sent := len(prepared.Messages)
	cut, aerr := pl.Cut(ctx, prepared, 0)
	if aerr != nil {
		t.Fatal(aerr.Message)
	}
	if len(cut.Messages) >= sent || cut.After.Tokens > cut.Limit || cut.Body == nil || cut.Result.Notice == "" {
		t.Errorf("cut: %d of %d messages, %d tokens for a limit of %d, body %d bytes, notice %q",
			len(cut.Messages), sent, cut.After.Tokens, cut.Limit, cut.Body.Size(), cut.Result.Notice)
	}
	if len(prepared.Messages) != sent || prepared.Body != nil || prepared.After != prepared.Before || prepared.Result.Notice != "" {
		t.Errorf("cutting changed the plan it was given: %d messages, body %v, after %d, notice %q",
			len(prepared.Messages), prepared.Body != nil, prepared.After.Tokens, prepared.Result.Notice)
	}
	harder, aerr := pl.Cut(ctx, prepared, 300)
	if aerr != nil {
		t.Fatal(aerr.Message)
	}
	if harder.After.Tokens > cut.Limit-300 || harder.After.Tokens >= cut.After.Tokens {
		t.Errorf("cut 300 tokens harder: %d tokens, first cut %d, limit %d", harder.After.Tokens, cut.After.Tokens, cut.Limit)
	}
	if first, _ := pl.Cut(ctx, prepared, 0); first.After != cut.After {
		t.Errorf("the same cut of the same plan: %d tokens, then %d", cut.After.Tokens, first.After.Tokens)
	}
	if split := cut.Split; split.Total != cut.Limits.MaxTokens || split.ResponseReserve != 64 || split.Conversation <= 0 {
		t.Errorf("the window's split: %+v", split)
	}
}

// What the client asked in its headers reaches the plan as Options: a
// cap on messages; a strategy of none, which leaves a conversation too
// long for its window to on_overflow; a strategy that does not exist,
// refused.
func TestOptionsSteerTheCut(t *testing.T) {
	pl := newPlanner(t, 1024)
	ctx := context.Background()
	req := chatOf(t, 40)
	prepared, aerr := pl.Prepare(ctx, Chat(req), Options{MaxMessages: 2})
	if aerr != nil {
		t.Fatal(aerr.Message)
	}
	// At most two besides the system prompt, and a conversation begins
	// with the user: here the last message alone.
	if cut, aerr := pl.Cut(ctx, prepared, 0); aerr != nil || len(cut.Messages) != 2 || cut.Messages[0].Role != "system" || cut.Messages[1].Content != "and now?" {
		t.Errorf("two messages asked: %d forwarded (%v), %+v", len(cut.Messages), roles(cut.Messages), aerr)
	}
	for _, c := range []struct{ strategy, code, says string }{
		{"none", "context_length_exceeded", "on_overflow"},
		{"fold-everything", "", "X-Ctxproxy-Strategy"},
	} {
		prepared, aerr := pl.Prepare(ctx, Chat(req), Options{Strategy: c.strategy})
		if aerr != nil {
			t.Fatal(aerr.Message)
		}
		if _, aerr := pl.Cut(ctx, prepared, 0); aerr == nil || aerr.Status != http.StatusBadRequest || aerr.Code != c.code || !strings.Contains(aerr.Message, c.says) {
			t.Errorf("strategy %q: %+v, want a 400 that says %q", c.strategy, aerr, c.says)
		}
	}
}

// A raw prompt goes through the same Prepare: counted against its window,
// never cut, its body forwarded as sent, and a warning when it is longer.
func TestPrepareRaw(t *testing.T) {
	pl := newPlanner(t, 1024)
	ctx := context.Background()
	for _, words := range []int{10, 2000} {
		body := fmt.Appendf(nil, `{"model":"small","prompt":%q,"options":{"num_ctx":900}}`, strings.Repeat("word ", words))
		req, prompt, ok := wire.DecodeRaw(body, 64)
		if !ok {
			t.Fatal("raw request not decoded")
		}
		p, aerr := pl.Prepare(ctx, Raw(wire.Ollama, &req, prompt, body), Options{})
		if aerr != nil {
			t.Fatal(aerr.Message)
		}
		long := p.After.Tokens > p.Limit
		if !p.Fixed || string(p.Body.Bytes()) != string(body) || p.NumCtx != 900 || p.Limit != 900 || p.Before != p.After {
			t.Errorf("%d words: fixed %v, num_ctx %d, limit %d, before %d after %d", words, p.Fixed, p.NumCtx, p.Limit, p.Before.Tokens, p.After.Tokens)
		}
		if long != (words == 2000) || long != (len(p.Warnings) == 1) {
			t.Errorf("%d words: %d tokens for a window of %d, warnings %q", words, p.After.Tokens, p.Limit, p.Warnings)
		}
	}
}

// A model Ollama answers from its cloud is left as sent, with a notice.
func TestCloudModelLeftAsSent(t *testing.T) {
	pl := newPlanner(t, 1024)
	ctx := context.Background()
	body := []byte(`{"model":"gpt-oss:120b-cloud","messages":[{"role":"user","content":"hi"}]}`)
	req, err := wire.DecodeChat(wire.Ollama, body)
	if err != nil {
		t.Fatal(err)
	}
	p, aerr := pl.Prepare(ctx, Chat(req), Options{})
	if aerr != nil {
		t.Fatal(aerr.Message)
	}
	cut, aerr := pl.Cut(ctx, p, 0)
	if aerr != nil {
		t.Fatal(aerr.Message)
	}
	if !cut.Fixed || string(cut.Body.Bytes()) != string(body) || !strings.Contains(cut.Notice, "cloud") || cut.Counter != nil {
		t.Errorf("cloud model: fixed %v, notice %q, counted %v", cut.Fixed, cut.Notice, cut.Counter != nil)
	}
}

func roles(msgs []rewrite.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Role + ":" + m.Content[:min(len(m.Content), 12)]
	}
	return out
}
