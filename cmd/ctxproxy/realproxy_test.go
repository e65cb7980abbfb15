package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// These tests run the terminal commands end to end against "ctxproxy
// serve" itself, started in process in front of testkit/fakebackend
// (the other tests use testkit/proxytest's server, built the same way).

// realProxy is a running "ctxproxy serve".
type realProxy struct {
	url  string
	env  map[string]string
	logs *syncBuffer
}

// tinyConfig gives the model "tiny" a 2000-token window (100 kept for the
// reply), so that a few messages fill it.
const tinyConfig = `models:
  tiny: {max_tokens: 2000, max_output_tokens: 100}
`

func startReal(t *testing.T, env map[string]string) *realProxy {
	t.Helper()
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "Hi from the model."})
	cfg := filepath.Join(t.TempDir(), "ctxproxy.yaml")
	if err := os.WriteFile(cfg, []byte(tinyConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	if env == nil {
		env = map[string]string{}
	}
	env["CTXPROXY_GPU_PROBE"] = "cpu"
	addr, logs, _ := startServe(t, []string{"--backend", be.URL, "--config", cfg}, env)
	return &realProxy{url: "http://" + addr, env: map[string]string{"TZ": "UTC"}, logs: logs}
}

// context runs "ctxproxy context ARGS" against the proxy.
func (p *realProxy) context(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errw bytes.Buffer
	err := run(context.Background(), append([]string{"context", "--proxy", p.url}, args...), envOf(p.env),
		strings.NewReader(stdin), &out, &errw)
	return out.String() + errw.String(), err
}

// must runs a context command that must succeed and print each of want.
func (p *realProxy) must(t *testing.T, stdin string, args []string, want ...string) string {
	t.Helper()
	out, err := p.context(t, stdin, args...)
	if err != nil {
		t.Fatalf("context %q: %v\n%s", args, err, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("context %q: output lacks %q:\n%s", args, w, out)
		}
	}
	return out
}

// TestRealProxyChat drives "ctxproxy chat" through a scripted session
// against the real server.
func TestRealProxyChat(t *testing.T) {
	p := startReal(t, nil)
	file := filepath.Join(t.TempDir(), "context.json")
	var out, errw syncBuffer
	script := lines("Hello there", "/stats", "/save", "/context", "/context list", "/context snapshot",
		"/context size 4096", "/context auto", "Tell me more", "/context compress", "/context stats",
		"/export "+file, "/clear", "/stats", "/import "+file, "/context clear", "/context list", "/quit")
	err := run(context.Background(), []string{"chat", "--proxy", p.url, "--history", "", "--session", "s1",
		"--model", "llama3.1", "--system", "Be brief."}, envOf(p.env), strings.NewReader(script), &out, &errw)
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, errw.String())
	}
	stdout, stderr := out.String(), errw.String()
	for _, want := range []string{
		"Hi from the model.\n",
		"Session       s1\n", "Model         llama3.1\n", "Messages      3\n", "Requests      1 (19 prompt + 6 completion tokens in all)\n",
		"Last request  19 prompt + 6 completion tokens (as the backend counted)",
		"Saved snapshot ", "Session        s1\n", "Tokens         ", "RAM            ", "Snapshots      1\n",
		"Auto-compress  on at 80% (smart, down to 60%)", "ID  ", "REASON", "manual",
		"Context size: 4,096 tokens (auto sizing off).", "Context size: auto, from free VRAM",
		"ℹ Nothing to compress: ", "Model memory", "KV cache", "Compression   ", "Requests      2 (61 prompt + 12 completion tokens in all)\n",
		"Exported 5 messages to " + file + ".", "Context cleared.", "Messages      0\n",
		"Imported 5 messages into session s1.",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("chat output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Count(stdout, "Hi from the model.") != 2 {
		t.Errorf("want two replies:\n%s", stdout)
	}
	if strings.Contains(stderr, "error:") || strings.Contains(stderr, "without ctxproxy's headers") {
		t.Errorf("chat stderr:\n%s", stderr)
	}
	if !strings.Contains(stderr, "llama3.1 · ") || !strings.Contains(stderr, "auto-compress at 80%") {
		t.Errorf("no status line:\n%s", stderr)
	}

	// "/context clear" emptied the stored conversation; the chat sends
	// its system prompt again with the next turn.
	show := p.must(t, "", []string{"export", "--session", "s1"})
	var exp struct {
		Messages []struct{ Role, Content string } `json:"messages"`
	}
	if err := json.Unmarshal([]byte(show), &exp); err != nil || len(exp.Messages) != 0 {
		t.Errorf("after /context clear: %v %s", err, show)
	}
}

// TestRealProxyContextCommands runs every "ctxproxy context" command
// against the real server.
func TestRealProxyContextCommands(t *testing.T) {
	p := startReal(t, nil)
	dir := t.TempDir()
	s := []string{"--session", "s2"}
	with := func(args ...string) []string { return append(args, s...) }

	p.must(t, "", []string{"list"}, "No sessions yet.")
	p.must(t, "", with("new", "--meta", "agent=test", "--model", "llama3.1"), "Session s2 is ready (agent=test).")
	p.must(t, "", with("add", "--importance", "0.9", "Implement feature X"), "Added 1 message to session s2 (1 message in all).")
	p.must(t, "Be brief.\n", with("add", "-", "--role", "system"), "Added 1 message to session s2 (2 messages in all).")
	p.must(t, "", with("show"), "Session       s2\n", "Model         llama3.1\n", "Messages      2\n", "Metadata      agent=test\n")
	p.must(t, "", []string{"status"}, "Version ", "Backend ", "(ollama, ready)", "Strategy      smart: act at 80%, cut to 60%",
		"Context size  auto from free VRAM (2,048–131,072 tokens), KV f16, 1 parallel", "RAM ", "level ok",
		"Snapshots     file store, auto at 80%, keep 20", "Sessions      1 (0 in flight)")
	p.must(t, "", with("status"), "Session        s2\n", "Model          llama3.1\n", "Snapshots      0\n")
	p.must(t, "", with("stats"), "Model         llama3.1\n", "Trimmed       0 messages dropped", "Truncations   0 by the backend")

	out := p.must(t, "", with("snapshot"), "Saved snapshot ", "(2 messages, ")
	snap := regexp.MustCompile(`\d{8}-\d{6}-[0-9a-f]{6}`).FindString(out)
	p.must(t, "", with("list"), "ID ", snap, "manual")
	raw := p.must(t, "", with("list", "--json"))
	var list struct {
		Snapshots []struct{ ID, Reason string } `json:"snapshots"`
	}
	if err := json.Unmarshal([]byte(raw), &list); err != nil || len(list.Snapshots) != 1 || list.Snapshots[0].ID != snap {
		t.Errorf("list --json: %v %s", err, raw)
	}
	p.must(t, "", with("add", "one more"), "3 messages in all")
	p.must(t, "", with("restore", snap), "Restored snapshot "+snap+": 2 messages.",
		"The context it replaced is snapshot ", "undoes this.")

	file := filepath.Join(dir, "s2.json")
	p.must(t, "", with("export", file), "Exported 2 messages to "+file+".")
	p.must(t, "", []string{"import", file, "--session", "s3"}, "Imported 2 messages into session s3.")
	p.must(t, "", []string{"show", "--session", "s3"}, "Messages      2\n", "Metadata      agent=test\n")
	if out, err := p.context(t, `{"messages": [{"content": "no role"}]}`, "import", "-", "--session", "s3"); err == nil ||
		!strings.Contains(err.Error(), `malformed import: messages[0]: "role" missing`) {
		t.Errorf("malformed import: %v %s", err, out)
	}

	p.must(t, "", []string{"size", "8192"}, "Context size: 8,192 tokens (auto sizing off).")
	p.must(t, "", []string{"size"}, "Context size: 8,192 tokens (auto sizing off).")
	p.must(t, "", []string{"status"}, "fixed at 8,192 tokens")
	if _, err := p.context(t, "", "size", "100"); err == nil || !strings.Contains(err.Error(), "outside context.min_size") {
		t.Errorf("size 100: %v", err)
	}
	p.must(t, "", []string{"auto"}, "Context size: auto, from free VRAM.")

	// Compress a conversation past the tiny model's window.
	long := []string{"--session", "long"}
	p.must(t, "", append([]string{"new", "--model", "tiny"}, long...), "is ready")
	for i := range 30 {
		p.must(t, strings.Repeat(fmt.Sprintf("turn %d ", i), 30)+"\n", append([]string{"add", "-", "--role", []string{"user", "assistant"}[i%2]}, long...))
	}
	p.must(t, "", append([]string{"show"}, long...), "⚠ Context at")
	p.must(t, "", append([]string{"compress"}, long...), "Compressed: ", "messages dropped", "ℹ Context trimmed. Kept ")
	p.must(t, "", append([]string{"compress"}, long...), "ℹ Nothing to compress")
	p.must(t, "", append([]string{"compress", "--json"}, long...), `"dropped":0`)

	p.must(t, "", with("clear"), "Context cleared.")
	p.must(t, "", with("show"), "Messages      0\n", "Metadata      agent=test\n")
	p.must(t, "", with("list"), "clear")
	p.must(t, "", with("clear", "--purge"), "Session s2 removed.")
	if _, err := p.context(t, "", with("show")...); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		t.Errorf("show after purge: %v", err)
	}
	p.must(t, "", []string{"list"}, "SESSION ", "long", "s3")
}

// TestRealProxyEscapedIDs: session ids that need escaping, dot segments
// included, reach the server as sent.
func TestRealProxyEscapedIDs(t *testing.T) {
	p := startReal(t, nil)
	for _, id := range []string{"team/a b", "/", "..", ".", "ünï/cødé", "%41"} {
		p.must(t, "", []string{"new", "--session", id}, "is ready")
		p.must(t, "", []string{"add", "hello", "--session", id}, "1 message in all")
		raw := p.must(t, "", []string{"show", "--json", "--session", id})
		var v struct {
			SessionID string `json:"session_id"`
		}
		if err := json.Unmarshal([]byte(raw), &v); err != nil || v.SessionID != id {
			t.Errorf("%q: %v %s", id, err, raw)
		}
	}
}

// TestRealProxyAdminToken: with admin.token the commands need it.
func TestRealProxyAdminToken(t *testing.T) {
	p := startReal(t, map[string]string{"CTXPROXY_ADMIN_TOKEN": "s3cret"})
	if _, err := p.context(t, "", "status"); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("status without the token: %v", err)
	}
	if _, err := p.context(t, "", "status", "--token", "wrong"); err == nil || !strings.Contains(err.Error(), "wrong admin token") {
		t.Errorf("status with a wrong token: %v", err)
	}
	p.env["CTXPROXY_ADMIN_TOKEN"] = "s3cret"
	p.must(t, "", []string{"status"}, "Version ")
}

// TestServeAdminOffBeyondLoopback: listening beyond loopback without
// admin.token leaves the admin API off and says so at start.
func TestServeAdminOffBeyondLoopback(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	_, port, _ := net.SplitHostPort(freeAddr(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"serve", "--listen", "0.0.0.0:" + port, "--backend", be.URL, "--log-format", "json"},
			envOf(map[string]string{"CTXPROXY_SNAPSHOTS_DIR": t.TempDir(), "CTXPROXY_GPU_PROBE": "cpu"}),
			strings.NewReader(""), io.Discard, logs)
	}()
	base := "http://127.0.0.1:" + port
	waitFor(t, "serve to answer /ctxproxy/healthz", func() bool {
		resp, err := http.Get(base + "/ctxproxy/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	resp, err := http.Get(base + "/ctxproxy/sessions")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "admin.token") {
		t.Errorf("admin route beyond loopback without a token: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(logs.String(), "admin API off") {
		t.Errorf("no start-up warning:\n%s", logs)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("serve: %v", err)
	}
}

// TestRealProxyInband: with commands.inband a chat client's "/context"
// is answered by ctxproxy itself.
func TestRealProxyInband(t *testing.T) {
	p := startReal(t, map[string]string{"CTXPROXY_COMMANDS_INBAND": "true"})
	p.must(t, "", []string{"add", "hello", "--session", "s"}, "1 message in all")
	req, _ := http.NewRequest("POST", p.url+"/api/chat",
		strings.NewReader(`{"model":"llama3.1","stream":false,"messages":[{"role":"user","content":"/context list"}]}`))
	req.Header.Set("X-Session-ID", "s")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Message struct{ Content string } `json:"message"`
		Done    bool                     `json:"done"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || !v.Done || v.Message.Content != "No snapshots yet." {
		t.Errorf("in-band /context list: %v %+v", err, v)
	}
}
