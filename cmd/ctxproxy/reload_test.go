package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/config"
	"github.com/ctxproxy/ctxproxy/proxy"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// reloadConfig is a config file for the reload tests: counting is
// approximate and mistral's window small, so a long chat outgrows it. (The
// model has no dot in its name: see the note on models: keys in the report.)
func reloadConfig(mode, level string) string {
	return fmt.Sprintf(`tokens:
  encoding: approximate
strategy:
  mode: %s
  on_overflow: forward
models:
  mistral: {max_tokens: 4096, max_output_tokens: 512}
log:
  level: %s
`, mode, level)
}

// writeConfig replaces the config file the way editors do: write a new
// file, rename it over the old one.
func writeConfig(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// longChat is a 40-turn Ollama chat request of about 4400 tokens (chars/4).
func longChat(stream bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"model":"mistral","stream":%v,"messages":[`, stream)
	for i := range 40 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"role":%q,"content":%q}`, role, strings.Repeat(fmt.Sprintf("turn %02d words ", i), 30))
	}
	b.WriteString("]}")
	return b.String()
}

// chatDropped sends a long chat and returns X-Ctxproxy-Dropped.
func chatDropped(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/api/chat", "application/json", strings.NewReader(longChat(false)))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("chat: status %d", resp.StatusCode)
	}
	return resp.Header.Get("X-Ctxproxy-Dropped")
}

// waitLog waits until the log holds n lines containing s.
func waitLog(t *testing.T, logs *syncBuffer, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(logs.String(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("log never had %d× %q:\n%s", n, s, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func metric(t *testing.T, addr, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	return ""
}

// unparsable sends a body that is no chat request: ctxproxy forwards it
// and logs that at debug level only.
func unparsable(t *testing.T, addr string) {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/api/chat", "application/json", strings.NewReader(`["not a chat"]`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

const debugLine = "forwarding unparsable chat request unchanged"

// TestReloadAppliesToNextRequest changes the strategy and the log level in
// the config file of a running ctxproxy: the next request is trimmed, and
// debug lines appear.
func TestReloadAppliesToNextRequest(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "ok"})
	file := filepath.Join(t.TempDir(), "ctxproxy.yaml")
	writeConfig(t, file, reloadConfig("none", "info"))
	addr, logs, _ := startServe(t, []string{"--config", file, "--backend", be.URL}, nil)

	if got := chatDropped(t, addr); got != "0" {
		t.Fatalf("mode none: X-Ctxproxy-Dropped %q, want 0", got)
	}
	unparsable(t, addr)

	writeConfig(t, file, reloadConfig("smart", "debug"))
	waitLog(t, logs, `"msg":"configuration reloaded"`, 1)

	if got := chatDropped(t, addr); got == "0" || got == "" {
		t.Errorf("after reload to smart: X-Ctxproxy-Dropped %q, want > 0", got)
	}
	if n := strings.Count(logs.String(), debugLine); n != 0 {
		t.Errorf("debug line logged at level info")
	}
	unparsable(t, addr)
	waitLog(t, logs, debugLine, 1)
	if got := metric(t, addr, `ctxproxy_config_reloads_total{result="applied"}`); got != "1" {
		t.Errorf("reloads applied = %q, want 1", got)
	}
	out := logs.String()
	for _, want := range []string{`"changed":"strategy.mode,log.level"`, `"strategy":"smart"`} {
		if !strings.Contains(out, want) {
			t.Errorf("reload log lacks %s", want)
		}
	}
}

// TestReloadRejectsInvalidFile writes a broken file: every problem is
// logged, the running configuration stays, and a fixed file is taken.
func TestReloadRejectsInvalidFile(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "ok"})
	file := filepath.Join(t.TempDir(), "ctxproxy.yaml")
	writeConfig(t, file, reloadConfig("none", "info"))
	addr, logs, _ := startServe(t, []string{"--config", file, "--backend", be.URL}, nil)

	writeConfig(t, file, reloadConfig("smart", "info")+`strategy_typo: 1
snapshots:
  max_count: -3
`)
	waitLog(t, logs, `"msg":"configuration rejected; the running configuration stays in force"`, 1)
	for _, want := range []string{`unknown key \"strategy_typo\"`, `snapshots.max_count: -3 is negative`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("problem %s not logged:\n%s", want, logs)
		}
	}
	if got := chatDropped(t, addr); got != "0" {
		t.Errorf("after a rejected reload: X-Ctxproxy-Dropped %q, want 0 (mode none kept)", got)
	}
	if got := metric(t, addr, "ctxproxy_config_last_reload_failed"); got != "1" {
		t.Errorf("ctxproxy_config_last_reload_failed = %q, want 1", got)
	}

	writeConfig(t, file, "{{{ not yaml")
	waitLog(t, logs, `"msg":"configuration rejected; the running configuration stays in force"`, 2)

	writeConfig(t, file, reloadConfig("smart", "info"))
	waitLog(t, logs, `"msg":"configuration reloaded"`, 1)
	if got := chatDropped(t, addr); got == "0" {
		t.Errorf("after the fix: X-Ctxproxy-Dropped %q, want > 0", got)
	}
	if got := metric(t, addr, "ctxproxy_config_last_reload_failed"); got != "0" {
		t.Errorf("ctxproxy_config_last_reload_failed = %q, want 0", got)
	}
}

// TestReloadNeedsRestart changes settings that cannot change at run time:
// they are named in the log, and ctxproxy goes on as it was.
func TestReloadNeedsRestart(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "ok"})
	file := filepath.Join(t.TempDir(), "ctxproxy.yaml")
	writeConfig(t, file, reloadConfig("none", "info"))
	addr, logs, _ := startServe(t, []string{"--config", file, "--backend", be.URL}, nil)

	writeConfig(t, file, reloadConfig("none", "info")+"max_body: 1MiB\nadmin:\n  token: hunter2\n")
	waitLog(t, logs, `"msg":"configuration reloaded"`, 1)
	out := logs.String()
	for _, key := range []string{"max_body", "admin.token"} {
		notice := regexp.MustCompile(`"msg":"setting changed but needs a restart to apply; still running with the old value".*"key":"` +
			regexp.QuoteMeta(key) + `"`)
		if !notice.MatchString(out) {
			t.Errorf("no restart notice for %s:\n%s", key, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Error("a secret value was logged")
	}
	// Still serving on the same address, with the old body limit.
	resp, err := http.Post("http://"+addr+"/api/chat", "application/json",
		strings.NewReader(`{"model":"llama3.1","stream":false,"messages":[{"role":"user","content":"`+strings.Repeat("x", 2<<20)+`"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("2 MiB body after max_body: 1MiB was reloaded: status %d, want 200 until a restart", resp.StatusCode)
	}
}

// TestReloadKeepsStreamInFlight reloads while a stream is open: the
// stream runs to its end on its connection.
func TestReloadKeepsStreamInFlight(t *testing.T) {
	hold := make(chan struct{})
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "one two three", Hold: hold})
	file := filepath.Join(t.TempDir(), "ctxproxy.yaml")
	writeConfig(t, file, reloadConfig("none", "info"))
	addr, logs, _ := startServe(t, []string{"--config", file, "--backend", be.URL}, nil)

	resp, err := http.Post("http://"+addr+"/api/chat", "application/json", strings.NewReader(longChat(true)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	writeConfig(t, file, reloadConfig("smart", "debug"))
	waitLog(t, logs, `"msg":"configuration reloaded"`, 1)
	close(hold)
	rest, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(rest), `"done":true`) {
		t.Fatalf("stream cut by the reload: %v %q", err, rest)
	}
	if got := resp.Header.Get("X-Ctxproxy-Dropped"); got != "0" {
		t.Errorf("stream begun under mode none: X-Ctxproxy-Dropped %q", got)
	}
	be.SetOptions(fakebackend.Options{Reply: "ok"})
	if got := chatDropped(t, addr); got == "0" {
		t.Errorf("next request after reload: X-Ctxproxy-Dropped %q, want > 0", got)
	}
}

// TestReloadOnSIGHUP sends the process SIGHUP: the reloader re-reads the
// configuration even though the file did not change.
func TestReloadOnSIGHUP(t *testing.T) {
	srv, err := proxy.New(proxy.Config{}, proxy.Deps{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var loads atomic.Int32
	var logs syncBuffer
	rl := &reloader{
		load: func() (config.Config, string, []string) {
			loads.Add(1)
			c := config.Default()
			c.Log.Level = "warn"
			return c, "", nil
		},
		trimmer: func(c config.Config) (*rewrite.Trimmer, error) { return rewrite.NewTrimmer(c.StrategyConfig(), nil) },
		srv:     srv, level: new(slog.LevelVar), log: slog.New(slog.NewJSONHandler(&logs, nil)),
		running: config.Default(), debounce: time.Millisecond,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rl.start(ctx)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for loads.Load() == 0 || !strings.Contains(logs.String(), "configuration reloaded") {
		if time.Now().After(deadline) {
			t.Fatalf("SIGHUP did not reload:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := rl.level.Level(); got != slog.LevelWarn {
		t.Errorf("log level after reload = %v, want WARN", got)
	}
}

// TestReloadPicksUpNewFile: started without a config file, ctxproxy
// takes ./ctxproxy.yaml when it appears, as it would a change.
func TestReloadPicksUpNewFile(t *testing.T) {
	t.Chdir(t.TempDir())
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "ok"})
	_, logs, _ := startServe(t, []string{"--backend", be.URL}, nil)
	writeConfig(t, config.DefaultFile, reloadConfig("none", "info"))
	waitLog(t, logs, `"msg":"configuration reloaded"`, 1)
	if !strings.Contains(logs.String(), `"strategy":"none"`) {
		t.Errorf("the new file's strategy was not applied:\n%s", logs.String())
	}
}
