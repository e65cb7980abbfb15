//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/ggufgen"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// ollamaCLI is the real Ollama's own binary (the one serving, found
// through its process), for the CLI's view of ctxproxy.
func ollamaCLI(t *testing.T, o *ollamaServer) string {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", o.pgid))
	if err != nil {
		t.Skipf("the Ollama binary is not found through its process: %v", err)
	}
	return exe
}

// runCLI runs the ollama CLI against host with args, returning its exit
// code and its output without the progress spinner's redraws.
func runCLI(t *testing.T, bin, host, dir string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OLLAMA_HOST="+strings.TrimPrefix(host, "http://"), "TERM=dumb", "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return code, lastLine(out)
}

// lastLine is the last line a CLI printed: what it said at the end
// (progress lines are redrawn with escapes; the last holds the verdict).
func lastLine(out []byte) string {
	last := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.LastIndex(line, "\r"); i >= 0 {
			line = line[i+1:]
		}
		if line = strings.TrimSpace(stripEscapes(line)); line != "" {
			last = line
		}
	}
	return last
}

// stripEscapes removes terminal escape sequences.
func stripEscapes(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b {
			j := i + 1
			if j < len(s) && s[j] == '[' {
				j++
				for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
					j++
				}
			}
			i = j
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// TestRealOllama_PullThrough: "ollama pull" of a model its registry does
// not have ends the same through ctxproxy as direct, every time: the
// streamed answer's last line (the error) reaches the CLI, which exits 1.
// Through an earlier ctxproxy, 13 of 150 such pulls exited 0 with no
// error. The registry is the test's own, on loopback.
func TestRealOllama_PullThrough(t *testing.T) {
	o := need(t)
	bin := ollamaCLI(t, o)
	registry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}`)
	}))
	defer registry.Close()
	p := startCtxproxy(t, o.url, "log:\n  level: warn\n")
	model := strings.TrimPrefix(registry.URL, "http://") + "/library/missing:latest"
	dir := t.TempDir()
	wantCode, want := runCLI(t, bin, o.url, dir, "pull", "--insecure", model)
	if wantCode == 0 || want == "" {
		t.Fatalf("direct: exit %d %q; want a failure with a message", wantCode, want)
	}
	for i := range 300 {
		code, got := runCLI(t, bin, p.url, dir, "pull", "--insecure", model)
		if code != wantCode || got != want {
			t.Fatalf("run %d through ctxproxy: exit %d %q; direct: exit %d %q", i, code, got, wantCode, want)
		}
	}
}

// TestRealOllama_CreateThrough: "ollama create" from a local GGUF, which
// uploads the blob (POST /api/blobs) and streams the create's progress,
// succeeds through ctxproxy every time, and the model exists after.
func TestRealOllama_CreateThrough(t *testing.T) {
	o := need(t)
	bin := ollamaCLI(t, o)
	p := startCtxproxy(t, o.url, "log:\n  level: warn\n")
	dir := t.TempDir()
	v := vocabgen.BPE(2000, "llama-bpe", 31)
	for i := range 60 {
		// A new blob each time, so each run uploads it.
		if err := ggufgen.Write(filepath.Join(dir, "m.gguf"), v, ggufgen.Shape{Seed: uint64(100 + i)}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "Modelfile"), []byte("FROM ./m.gguf\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("edge-create-%d", i)
		code, last := runCLI(t, bin, p.url, dir, "create", name, "-f", "Modelfile")
		if code != 0 || last != "success" {
			t.Fatalf("run %d: exit %d, last line %q", i, code, last)
		}
		if c, out := runCLI(t, bin, o.url, dir, "show", name); c != 0 {
			t.Fatalf("run %d: created model not found: %s", i, out)
		}
		runCLI(t, bin, o.url, dir, "rm", name)
	}
}

// TestRealOllama_NamesAsOllama: a body that names messages twice, in two
// spellings, is counted as Ollama runs it (the last, "Messages"): the
// count ctxproxy sends equals Ollama's prompt_eval_count. "Model" beside
// "model" runs, and is stored as, the model Ollama runs; "Stream": true
// beside "stream": false streams, and ctxproxy says so.
func TestRealOllama_NamesAsOllama(t *testing.T) {
	o := need(t)
	p := startCtxproxy(t, o.url, "")
	long, _ := json.Marshal(conversation(7, 13))
	body := `{"model":"` + modelTiny + `","stream":false,"messages":[{"role":"user","content":"hi"}],"Messages":` + string(long) + `}`
	resp, err := http.Post(p.url+"/api/chat", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var reply struct {
		PromptEvalCount int `json:"prompt_eval_count"`
	}
	json.NewDecoder(resp.Body).Decode(&reply)
	resp.Body.Close()
	if sent := headerInt(t, resp.Header, "X-Ctxproxy-Tokens"); sent != reply.PromptEvalCount || sent < 300 {
		t.Errorf("ctxproxy counted %d tokens; Ollama evaluated %d", sent, reply.PromptEvalCount)
	}

	body = `{"model":"` + modelTiny + `","Model":"` + modelTools + `","stream":false,"Stream":true,"messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequest(http.MethodPost, p.url+"/api/chat", strings.NewReader(body))
	req.Header.Set("X-Session-ID", "spelled")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var lines []map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			lines = append(lines, m)
		}
	}
	resp.Body.Close()
	if len(lines) < 2 || lines[0]["model"] != modelTools {
		t.Errorf("Ollama answered %d lines, model %v; want a stream from %s", len(lines), lines[0]["model"], modelTools)
	}
	recs := p.logMessages(t, "chat")
	last := recs[len(recs)-1]
	if last["model"] != modelTools || last["stream"] != true {
		t.Errorf("ctxproxy logged model %v stream %v; Ollama ran %s streaming", last["model"], last["stream"], modelTools)
	}
	if status, info := p.get(t, "/ctxproxy/sessions/spelled"); status != 200 || !strings.Contains(string(info), `"model":"`+modelTools+`"`) {
		t.Errorf("stored session: %d %s", status, info)
	}
}
