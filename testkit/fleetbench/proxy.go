package fleetbench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/ggufgen"
	"github.com/ctxproxy/ctxproxy/testkit/loopback"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// Proxy is a running ctxproxy in its own process group.
type Proxy struct {
	URL string
	// Log is its log file.
	Log string
	cmd *exec.Cmd
}

// Config is a ctxproxy configuration with servers as its backends:
// (named by their Name), routing as backend.routing ("sessions" or
// "round_robin"), model given a window of window tokens, and extra
// YAML appended (a snapshots: section for replicas).
func Config(servers []*Ollama, routing, model string, window int, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "backend: {kind: ollama, routing: %s, probe_interval: 1s}\nbackends:\n", routing)
	for _, s := range servers {
		fmt.Fprintf(&b, "  - {name: %s, url: %q}\n", s.Name, s.URL)
	}
	fmt.Fprintf(&b, "models: {%s: {max_tokens: %d}}\n%s\n", model, window, extra)
	return b.String()
}

// StartProxy runs the ctxproxy binary bin with the configuration yaml on
// a free loopback port, its files and log in dir, and waits until it is
// ready.
func StartProxy(ctx context.Context, bin, dir, yaml string) (*Proxy, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "ctxproxy.yaml")
	if err := os.WriteFile(conf, []byte(yaml), 0o644); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "ctxproxy.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	port, err := loopback.FreePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "serve", "--config", conf, "--listen", addr, "--log-format", "json", "--log-level", "info")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CTXPROXY_SNAPSHOTS_DIR="+filepath.Join(dir, "data"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proxy{URL: "http://" + addr, Log: logPath, cmd: cmd}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(p.URL + "/ctxproxy/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
	}
	p.Stop()
	return nil, errors.New("ctxproxy did not become ready; see " + logPath)
}

// PGID is the proxy's process group.
func (p *Proxy) PGID() int { return p.cmd.Process.Pid }

// Stop ends the proxy: SIGTERM, then SIGKILL after ten seconds.
func (p *Proxy) Stop() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// Shape is the benchmark model's: tiny's shape (a 2-layer llama of width
// 64 with random weights) and tiny's 276-token byte-level vocabulary,
// about a token a character, with an 8192-token window. On a CPU Ollama
// reads a 2,000-token prompt of it in about 0.7 s and a 4,000-token one
// in about 2 s (measured on two cores), and the same prompt from its
// cache in a few milliseconds: wider models make a run of hundreds of
// turns take hours there.
var Shape = ggufgen.Shape{Layers: 2, Embedding: 64, Heads: 4, KVHeads: 2, FeedForward: 128, Context: 8192, Seed: 7}

// WriteModel writes a model of shape into dir (model.gguf and its
// Modelfile: tiny's ChatML template, 16 output tokens) and returns the
// Modelfile's path, for Ollama.Create.
func WriteModel(dir string, shape ggufgen.Shape) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	v := vocabgen.BPE(256+16+len(vocabgen.Specials), "default", 1)
	if err := ggufgen.Write(filepath.Join(dir, "model.gguf"), v, shape); err != nil {
		return "", err
	}
	mf := filepath.Join(dir, "Modelfile")
	const text = `FROM ./model.gguf
TEMPLATE """{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
"""
PARAMETER stop <|im_end|>
PARAMETER num_predict 16
`
	return mf, os.WriteFile(mf, []byte(text), 0o644)
}
