package main

import (
	"bufio"
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
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func envOf(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for the server goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe runs "ctxproxy serve" in the background and waits until it
// is ready. The returned stop cancels it and returns run's error.
func startServe(t *testing.T, args []string, env map[string]string) (addr string, logs *syncBuffer, stop func() error) {
	t.Helper()
	addr = freeAddr(t)
	if env == nil {
		env = map[string]string{}
	}
	if env["CTXPROXY_SNAPSHOTS_DIR"] == "" {
		env["CTXPROXY_SNAPSHOTS_DIR"] = t.TempDir()
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs = &syncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, append([]string{"serve", "--listen", addr, "--log-format", "json"}, args...),
			envOf(env), strings.NewReader(""), io.Discard, logs)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/ctxproxy/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case err := <-errc:
			cancel()
			t.Fatalf("serve exited: %v\n%s", err, logs)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("serve did not start\n%s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var once sync.Once
	var result error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-errc:
			case <-time.After(20 * time.Second):
				result = fmt.Errorf("serve did not stop")
			}
		})
		return result
	}
	t.Cleanup(func() { stop() })
	return addr, logs, stop
}

func TestServeEndToEnd(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "pong"})
	addr, logs, stop := startServe(t, []string{"--backend", be.URL}, nil)

	resp, err := http.Get("http://" + addr + "/ctxproxy/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz: %v %v", err, resp)
	}
	resp.Body.Close()
	resp, err = http.Post("http://"+addr+"/api/chat", "application/json",
		strings.NewReader(`{"model":"llama3.1","stream":false,"messages":[{"role":"user","content":"ping secret-content"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "pong") {
		t.Errorf("reply: %s", body)
	}
	var hout bytes.Buffer
	if err := run(context.Background(), []string{"health", "--listen", addr}, envOf(nil), nil, &hout, io.Discard); err != nil {
		t.Errorf("health: %v", err)
	}
	if err := stop(); err != nil {
		t.Errorf("serve returned %v", err)
	}
	if err := run(context.Background(), []string{"health", "--listen", addr}, envOf(nil), nil, io.Discard, io.Discard); err == nil {
		t.Errorf("health succeeded with the proxy stopped")
	}
	out := logs.String()
	if !strings.Contains(out, `"msg":"chat"`) || !strings.Contains(out, `"model":"llama3.1"`) {
		t.Errorf("no chat log line:\n%s", out)
	}
	if strings.Contains(out, "secret-content") {
		t.Errorf("message content was logged:\n%s", out)
	}
	// Durations carry their unit: milliseconds, not slog's bare
	// nanoseconds.
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, `"msg":"chat"`) {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("chat log line %q: %v", line, err)
		}
		if d, ok := rec["duration_ms"].(float64); !ok || d < 0 || d > 60_000 || rec["duration"] != nil {
			t.Errorf("chat log line's duration: %q", line)
		}
	}
}

// TestGracefulShutdown stops the server while a stream is in flight: the
// stream finishes, new connections are refused.
func TestGracefulShutdown(t *testing.T) {
	hold := make(chan struct{})
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Hold: hold, Reply: "abcdef"})
	addr, _, stop := startServe(t, []string{"--backend", be.URL}, map[string]string{"CTXPROXY_SHUTDOWN_GRACE": "10s"})

	resp, err := http.Post("http://"+addr+"/api/chat", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// Wait until the listener is closed, then let the stream finish.
	waitFor(t, "the listener to close", func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	close(hold)
	rest, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(rest), `"done":true`) {
		t.Errorf("in-flight stream cut by shutdown: %v %q", err, rest)
	}
	if err := <-stopped; err != nil {
		t.Errorf("serve: %v", err)
	}
}

func TestVersionAndUnknownCommand(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, envOf(nil), nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "ctxproxy ") {
		t.Errorf("version: %q", out.String())
	}
	if err := run(context.Background(), []string{"frobnicate"}, envOf(nil), nil, io.Discard, io.Discard); err == nil {
		t.Error("unknown command accepted")
	}
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	os.WriteFile(file, []byte("listen: 127.0.0.1:1001\nstrategy:\n  mode: token_budget\n  threshold: 0.9\nlog:\n  level: warn\n"+
		"models:\n  llama3.1: {max_tokens: 32768, max_output_tokens: 2048}\n  qwen2.5:7b: {max_tokens: 16384}\n"), 0o644)
	env := map[string]string{"CTXPROXY_LISTEN": "127.0.0.1:1002", "CTXPROXY_STRATEGY_THRESHOLD": "0.85",
		"CTXPROXY_STRATEGY_COMPOSITE": "sliding_window,token_budget", "CTXPROXY_CONTEXT_VRAM_BUFFER": "1GiB"}
	cf := newConfigFlags("serve", envs(env), allConfigFlags...)
	c, used, problems, err := cf.load([]string{"--config", file, "--listen", "127.0.0.1:1003"}, envs(env))
	if err != nil || len(problems) > 0 {
		t.Fatalf("%v %v", err, problems)
	}
	if used != file {
		t.Errorf("file used = %q", used)
	}
	for _, tc := range []struct{ name, got, want string }{
		{"flag beats env and file", c.Listen, "127.0.0.1:1003"},
		{"env beats file", fmt.Sprint(c.Strategy.Threshold), "0.85"},
		{"file beats default", c.Strategy.Mode, "token_budget"},
		{"file level", c.Log.Level, "warn"},
		{"default", c.Backend.URL, "http://127.0.0.1:11434"},
		{"env list", strings.Join(c.Strategy.Composite, "|"), "sliding_window|token_budget"},
		{"env size", c.Context.VRAMBuffer.String(), "1GiB"},
		// Model names with dots stay one key (viper splits keys on dots
		// by default).
		{"dotted model name", fmt.Sprint(c.Models["llama3.1"]), "{32768 2048 0}"},
		{"dotted model with tag", fmt.Sprint(c.Models["qwen2.5:7b"].MaxTokens), "16384"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

func envs(m map[string]string) env {
	return env{environ: envOf(m), getenv: getenvOf(envOf(m)), stderr: io.Discard, stdout: io.Discard}
}

func TestCheckConfigReportsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "bad.yaml")
	os.WriteFile(file, []byte(`listen: nope
max_body: lots
strategy:
  mode: magic
  threshold: 0.5
  target: 0.7
  unknown_knob: 1
context:
  kv_quantization: q2
gpu:
  guard: {compress_at: 0.9, shrink_at: 0.8}
models:
  llama3.1: {max_tokens: 1000, max_output_tokens: 2000}
`), 0o644)
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"check-config", "--config", file}, envOf(nil), nil, io.Discard, &stderr)
	if err == nil {
		t.Fatal("check-config accepted a bad file")
	}
	for _, want := range []string{
		`unknown key "strategy.unknown_knob"`, `"lots" is not a size`, `listen: "nope" is not host:port`,
		`strategy.mode: "magic" is not one of none, sliding_window`, `strategy.target: 0.7 is not in (0, threshold]`,
		`context.kv_quantization: "q2"`, `gpu.guard: need compress_at (0.9) ≤ shrink_at (0.8)`, `models.llama3.1`,
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("missing problem %q in:\n%s", want, stderr.String())
		}
	}

	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"check-config"}, envOf(nil), nil, &stdout, io.Discard); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	if !strings.Contains(stdout.String(), "ok") {
		t.Errorf("check-config output: %q", stdout.String())
	}
}

func TestServeRefusesBadConfig(t *testing.T) {
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"serve", "--backend", "ftp://x"}, envOf(nil), nil, io.Discard, &stderr)
	if err == nil || !strings.Contains(stderr.String(), "backend.url") {
		t.Errorf("err %v, stderr %q", err, stderr.String())
	}
}

// TestServeRefusesRebinding: the binary bound to loopback refuses a
// request addressed to a foreign host name (DNS rebinding), and serves
// one addressed to localhost.
func TestServeRefusesRebinding(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	addr, _, stop := startServe(t, []string{"--backend", be.URL}, nil)
	defer stop()
	for host, want := range map[string]int{"evil.example": 403, "localhost": 200} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/tags", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

// TestServeRedactsBackendPassword: a backend URL with a password is
// never written to the log or to check-config's output in the clear.
func TestServeRedactsBackendPassword(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	u := strings.Replace(be.URL, "http://", "http://user:s3cret-pass@", 1)
	_, logs, stop := startServe(t, []string{"--backend", u}, nil)
	stop()
	var out bytes.Buffer
	_ = run(context.Background(), []string{"check-config", "--backend", u}, envOf(nil), strings.NewReader(""), &out, &out)
	for name, text := range map[string]string{"log": logs.String(), "check-config": out.String()} {
		if strings.Contains(text, "s3cret-pass") {
			t.Errorf("%s shows the password:\n%s", name, text)
		}
	}
	if !strings.Contains(logs.String(), "user:xxxxx@") {
		t.Errorf("the log does not show the redacted backend:\n%s", logs.String())
	}
}

// TestServeConnectionCap: beyond limits.max_connections, with no
// connection idle (one is in the middle of a request, the others have not
// sent one yet), new connections are closed on arrival and counted.
func TestServeConnectionCap(t *testing.T) {
	hold := make(chan struct{})
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Hold: hold})
	addr, _, stop := startServe(t, []string{"--backend", be.URL}, map[string]string{"CTXPROXY_LIMITS_MAX_CONNECTIONS": "3"})
	defer stop()
	defer close(hold)
	http.DefaultClient.CloseIdleConnections() // startServe's polling
	// Ask on a connection of its own until the server has counted
	// startServe's polling connections out: only the asking one is open.
	busy, _, _ := request(t, addr, http.MethodGet, "/metrics", "")
	openOne := regexp.MustCompile(`(?m)^ctxproxy_connections_open 1$`)
	waitFor(t, "the polling connections to be counted out", func() bool {
		_, text, err := busy.do(addr, http.MethodGet, "/metrics", "")
		if err != nil {
			t.Fatal(err)
		}
		return openOne.MatchString(text)
	})
	// That connection then streams a chat the backend holds: busy, it is
	// never closed to make room.
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/chat",
		strings.NewReader(`{"model":"llama3.1","messages":[{"role":"user","content":"hi"}]}`))
	if err := req.Write(busy); err != nil {
		t.Fatal(err)
	}
	held := []net.Conn{busy}
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	extra.SetReadDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(extra, "GET /ctxproxy/healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
	if n, err := extra.Read(make([]byte, 64)); err == nil {
		t.Errorf("a fourth connection was served (%d bytes)", n)
	}
	extra.Close()
	// Make room; counter dials again until the server has counted the
	// closed connection out.
	held[len(held)-1].Close()
	held = held[:len(held)-1]
	if n := counter(t, addr, "ctxproxy_connections_refused_total"); n < 1 {
		t.Errorf("refused connections not counted")
	}
}

// TestServeStoreNone: with snapshots.store none nothing is written to
// disk, chat works, and the session routes say sessions are off.
func TestServeStoreNone(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	dir := t.TempDir()
	addr, _, stop := startServe(t, []string{"--backend", be.URL}, map[string]string{
		"CTXPROXY_SNAPSHOTS_STORE": "none", "CTXPROXY_SNAPSHOTS_DIR": dir})
	defer stop()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/chat",
		strings.NewReader(`{"model":"m","stream":false,"messages":[{"role":"user","content":"secret"}]}`))
	req.Header.Set("X-Session-ID", "s")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("chat: %d", resp.StatusCode)
	}
	r2, err := http.Get("http://" + addr + "/ctxproxy/sessions/s")
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode == 200 {
		t.Error("a session was kept with snapshots.store none")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("files written with snapshots.store none: %v", entries)
	}
}

// TestServeRetention: with snapshots.max_sessions, serve deletes the
// least recently updated sessions beyond it (at start, then every
// minute).
func TestServeRetention(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	dir := t.TempDir()
	addr, _, stop := startServe(t, []string{"--backend", be.URL}, map[string]string{"CTXPROXY_SNAPSHOTS_DIR": dir})
	for _, id := range []string{"a", "b", "c"} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/chat",
			strings.NewReader(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("X-Session-ID", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// Sessions are stored off the request path: wait until this one
		// is, so that each is updated after the one before.
		waitFor(t, "session "+id+" to be stored", func() bool {
			resp, err := http.Get("http://" + addr + "/ctxproxy/sessions/" + id)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	addr, _, stop = startServe(t, []string{"--backend", be.URL}, map[string]string{"CTXPROXY_SNAPSHOTS_DIR": dir,
		"CTXPROXY_SNAPSHOTS_MAX_SESSIONS": "2"})
	defer stop()
	type item struct {
		ID string `json:"session_id"`
	}
	var list []item
	waitFor(t, "retention to leave two sessions", func() bool {
		resp, err := http.Get("http://" + addr + "/ctxproxy/sessions")
		if err != nil {
			t.Fatal(err)
		}
		var answer struct {
			Sessions []item `json:"sessions"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&answer)
		list = answer.Sessions
		resp.Body.Close()
		return len(list) <= 2
	})
	if len(list) != 2 || list[0].ID == "a" || list[1].ID == "a" {
		t.Errorf("sessions after retention: %+v, want b and c", list)
	}
}

// TestServeStartupChecklist: the log says, one line each, that a /v1
// backend URL was taken for its root, whether the backend answers, where
// sessions are stored (an absolute path) and that the admin API is on;
// and chat through a /v1 backend URL works.
func TestServeStartupChecklist(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	addr, logs, stop := startServe(t, []string{"--backend", be.URL + "/v1/"}, nil)
	defer stop()
	resp, err := http.Post("http://"+addr+"/api/chat", "application/json",
		strings.NewReader(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("chat through a /v1 backend URL: %d", resp.StatusCode)
	}
	waitFor(t, `the log line "admin API on"`, func() bool { return strings.Contains(logs.String(), "admin API on") })
	out := logs.String()
	for _, want := range []string{"ends in /v1", `"msg":"backend answers"`, `"kind":"ollama"`, `"msg":"sessions: stored in files","dir":"/`,
		"admin API on", "models and their windows: llama3.1:8b 131072"} {
		if !strings.Contains(out, want) {
			t.Errorf("start-up log lacks %q:\n%s", want, out)
		}
	}
}

// A misspelt CTXPROXY_ variable is warned about, not ignored without a
// word; it is not a problem, so check-config still passes.
func TestCheckConfigWarnsOfUnknownVariables(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"check-config"}, envOf(map[string]string{"CTXPROXY_STRATEGY_MODEE": "smart"}), nil, &stdout, &stderr)
	if err != nil {
		t.Fatalf("check-config: %v\n%s", err, stderr.String())
	}
	if want := `warning: environment variable CTXPROXY_STRATEGY_MODEE is not one ctxproxy reads (did you mean "CTXPROXY_STRATEGY_MODE"?)`; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q lacks %q", stderr.String(), want)
	}
}
