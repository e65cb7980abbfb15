package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// forwardedOptions returns what the backend got last on /api/chat: its
// options.num_ctx and its think member.
func forwardedOptions(t *testing.T, be *fakebackend.Fake) (numCtx int, think string) {
	t.Helper()
	got, ok := be.Last("/api/chat")
	if !ok {
		t.Fatal("the backend got no /api/chat request")
	}
	var body struct {
		Options struct {
			NumCtx int `json:"num_ctx"`
		} `json:"options"`
		Think json.RawMessage `json:"think"`
	}
	if err := json.Unmarshal(got.Body, &body); err != nil {
		t.Fatal(err)
	}
	return body.Options.NumCtx, string(body.Think)
}

// TestModelNumCtxIsTheCeiling: a model whose Modelfile sets num_ctx runs
// at most at that num_ctx, sized from memory below it; with
// context.model_num_ctx: ignore it is sized as any other model.
func TestModelNumCtxIsTheCeiling(t *testing.T) {
	opts := fakebackend.Options{Modelfile: "FROM llama3.1\nPARAMETER num_ctx 16384\nPARAMETER stop <|eot_id|>"}
	cases := []struct {
		name string
		su   setup
		want func(n int) bool
	}{
		{"ceiling", setup{}, func(n int) bool { return n == 16384 }},
		{"below it when memory is short", setup{free: 2 << 30}, func(n int) bool { return n >= 2048 && n < 16384 }},
		{"ignored", setup{gpu: gpu.Config{ModelNumCtx: gpu.ModelNumCtxIgnore}}, func(n int) bool { return n > 16384 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			be := fakebackend.New(t, fakebackend.Ollama, opts)
			sys := newSystem(t, be.URL, c.su)
			resp := post(t, sys.url+"/api/chat", textConversation("llama3.1:8b", 2, 1, nil), nil)
			io.Copy(io.Discard, resp.Body)
			n, _ := forwardedOptions(t, be)
			if h := header(resp, "X-Ctxproxy-Num-Ctx"); !c.want(n) || h != n || header(resp, "X-Ctxproxy-Limit") > n {
				t.Errorf("num_ctx forwarded %d, header %d, limit %d", n, h, header(resp, "X-Ctxproxy-Limit"))
			}
		})
	}
	t.Run("the window when ctxproxy sets none", func(t *testing.T) {
		be := fakebackend.New(t, fakebackend.Ollama, opts)
		off := false
		sys := newSystem(t, be.URL, setup{gpu: gpu.Config{AutoSize: &off}})
		resp := post(t, sys.url+"/api/chat", textConversation("llama3.1:8b", 2, 1, nil), nil)
		io.Copy(io.Discard, resp.Body)
		if n, _ := forwardedOptions(t, be); n != 0 || header(resp, "X-Ctxproxy-Limit") != 16384-1024 {
			t.Errorf("num_ctx forwarded %d, limit %d; want none, and the model's own window less the reserve", n, header(resp, "X-Ctxproxy-Limit"))
		}
	})
}

// TestClaudeCodeRequest: what Claude Code sends on /v1/messages (system
// entries among the messages, thinking adaptive, metadata, cache_control,
// context_management, the beta query) is answered 200 on a model that
// cannot think, with thinking dropped as Ollama's own /v1/messages drops
// it; a model that thinks gets think true for "enabled".
func TestClaudeCodeRequest(t *testing.T) {
	const body = `{"model":"llama3.1:8b","max_tokens":32000,"stream":true,
		"system":[{"type":"text","text":"You are an agent.","cache_control":{"type":"ephemeral"}}],
		"messages":[{"role":"user","content":[{"type":"text","text":"<system-reminder>cwd</system-reminder>"},{"type":"text","text":"Say hi","cache_control":{"type":"ephemeral"}}]},
			{"role":"system","content":"The user is in plan mode."}],
		"tools":[{"name":"Bash","description":"Run a command","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}],
		"metadata":{"user_id":"user_abc_account__session_5f0c"},
		"thinking":{"type":"%s"},
		"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]}}`
	for _, c := range []struct {
		thinking string
		caps     []string
		want     string
	}{
		{"adaptive", nil, ""},
		{"enabled", nil, ""},
		{"enabled", []string{"completion", "tools", "thinking"}, "true"},
	} {
		t.Run(c.thinking+" "+strings.Join(c.caps, ","), func(t *testing.T) {
			be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Capabilities: c.caps})
			sys := newSystem(t, be.URL, setup{})
			resp := post(t, sys.url+"/v1/messages?beta=true", []byte(strings.Replace(body, "%s", c.thinking, 1)), nil)
			reply := readAll(t, resp.Body)
			if resp.StatusCode != 200 || !strings.Contains(reply, "event: message_stop") {
				t.Fatalf("status %d: %s", resp.StatusCode, reply)
			}
			if _, think := forwardedOptions(t, be); think != c.want {
				t.Errorf("think forwarded %q, want %q", think, c.want)
			}
			msgs := forwardedMessages(t, mustLast(t, be).Body)
			if len(msgs) != 3 || msgs[2]["role"] != "system" || msgs[2]["content"] != "The user is in plan mode." {
				t.Errorf("forwarded messages %v", msgs)
			}
		})
	}
}

func mustLast(t *testing.T, be *fakebackend.Fake) fakebackend.Request {
	t.Helper()
	got, ok := be.Last("/api/chat")
	if !ok {
		t.Fatal("the backend got no /api/chat request")
	}
	return got
}

// TestToolsAloneOverTheWindow: a request whose tools alone take the
// window is answered 400 context_length_exceeded at once, in the
// client's dialect, and nothing reaches the backend: ctxproxy cuts
// messages, never tools.
func TestToolsAloneOverTheWindow(t *testing.T) {
	// A model counted by estimate: the fake's template prints no tools,
	// so by its bytes the prompt would fit (fitsUnread).
	info := fakebackend.Llama31ModelInfo()
	delete(info, "tokenizer.ggml.model")
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{ModelInfo: info})
	sys := newSystem(t, be.URL, setup{tokens: budget.Config{Models: map[string]budget.Model{"llama3.1": {MaxTokens: 2048}}}})
	var tools []string
	for i := range 40 {
		tools = append(tools, fmt.Sprintf(`{"type":"function","function":{"name":"tool%d","description":"%s","parameters":{"type":"object"}}}`,
			i, strings.Repeat("does a thing with care ", 20)))
	}
	body := `{"model":"llama3.1:8b","messages":[{"role":"user","content":"hi"}],"tools":[` + strings.Join(tools, ",") + `]}`
	resp := post(t, sys.url+"/v1/chat/completions", []byte(body), nil)
	reply := readAll(t, resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(reply, "context_length_exceeded") || !strings.Contains(reply, "never tools") {
		t.Errorf("status %d: %s", resp.StatusCode, reply)
	}
	if _, ok := be.Last("/api/chat"); ok {
		t.Error("the request reached the backend")
	}
}
