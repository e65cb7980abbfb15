// Package fleetbench puts several real Ollama servers behind one ctxproxy
// (its backends:) and replays concurrent chat sessions through it the way
// a chat UI sends them: the whole history on every turn, the model's
// reply appended, the session named by X-Session-ID. Each answer gives
// the server that served it (X-Ctxproxy-Backend), Ollama's prompt time
// and counts, the time to its first byte and its status, so that a run
// can be held against ctxproxy's session routing (a session's turns on
// one server, whose prompt cache holds its history) or compared with
// round robin. scripts/backends (the full harness) and the e2e suite's
// TestRealOllama_Backends (its short version) both use it.
package fleetbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/loopback"
)

// Ollama is a real Ollama server started by scripts/realollama/start.sh
// (or a start.sh of one's own) in its own process group.
type Ollama struct {
	// Name is its name in ctxproxy's backends: (and X-Ctxproxy-Backend).
	Name string
	// URL is its base URL; Log its serve log; Bin the ollama binary.
	URL, Log, Bin string
	// PGID is its process group: serve and its model runners.
	PGID int

	script, dir string
	port        int
	env         []string
	stderr      io.Writer
}

// StartOllama runs script (a start.sh: PORT WORKDIR, printing OLLAMA_URL,
// OLLAMA_PGID, OLLAMA_LOG and OLLAMA_BIN) on a free loopback port with
// dir as its work directory and env added to the environment
// (REALOLLAMA_VERSION picks the version, OLLAMA_NUM_PARALLEL its slots).
// The script's progress goes to stderr (nil: discarded).
func StartOllama(ctx context.Context, script, name, dir string, env []string, stderr io.Writer) (*Ollama, error) {
	port, err := loopback.FreePort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	o := &Ollama{Name: name, script: script, dir: dir, port: port, env: env, stderr: stderr}
	if err := o.start(ctx); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *Ollama) start(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, o.script, strconv.Itoa(o.port), o.dir)
	cmd.Env = append(append(os.Environ(), "OLLAMA_KEEP_ALIVE=1h"), o.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	if o.stderr != nil {
		cmd.Stderr = o.stderr
	}
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s %d: %v", o.script, o.port, err)
	}
	vars := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			vars[k] = v
		}
	}
	pgid, err := strconv.Atoi(vars["OLLAMA_PGID"])
	if err != nil || vars["OLLAMA_URL"] == "" {
		return fmt.Errorf("%s printed no OLLAMA_URL and OLLAMA_PGID:\n%s", o.script, out)
	}
	o.URL, o.PGID, o.Log, o.Bin = vars["OLLAMA_URL"], pgid, vars["OLLAMA_LOG"], vars["OLLAMA_BIN"]
	return nil
}

// Restart starts the server again on its port and work directory (its
// models are still there), after Kill or Stop.
func (o *Ollama) Restart(ctx context.Context) error { return o.start(ctx) }

// Kill ends the server at once, as a crash would: SIGKILL to its process
// group, runners included.
func (o *Ollama) Kill() { o.signal(syscall.SIGKILL, 0) }

// Stop ends the server: SIGTERM to its group, SIGKILL after a grace.
func (o *Ollama) Stop() { o.signal(syscall.SIGTERM, 10*time.Second) }

func (o *Ollama) signal(sig syscall.Signal, grace time.Duration) {
	if o.PGID <= 1 {
		return
	}
	_ = syscall.Kill(-o.PGID, sig)
	if !WaitGone(o.PGID, grace) {
		_ = syscall.Kill(-o.PGID, syscall.SIGKILL)
		WaitGone(o.PGID, 5*time.Second)
	}
}

// WaitGone waits up to d for a process group to have no live member.
// serve is not our child (start.sh backgrounds it), so its exit may be
// reaped late: zombies do not count.
func WaitGone(pgid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if !GroupAlive(pgid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// GroupAlive reports whether a process group has a live member (one
// that is not a zombie).
func GroupAlive(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return syscall.Kill(-pgid, 0) == nil
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // state ppid pgrp ...
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}

// Alive reports whether the server answers /api/version.
func (o *Ollama) Alive() bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(o.URL + "/api/version")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Version is what the server's /api/version says ("" when it does not).
func (o *Ollama) Version() string {
	var v struct {
		Version string `json:"version"`
	}
	_ = GetJSON(o.URL+"/api/version", &v)
	return v.Version
}

// Loaded returns the models the server has in memory (/api/ps).
func (o *Ollama) Loaded() ([]string, error) {
	var ps struct {
		Models []struct {
			Name string `json:"name"`
		} `json:"models"`
	}
	if err := GetJSON(o.URL+"/api/ps", &ps); err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ps.Models {
		out = append(out, m.Name)
	}
	return out, nil
}

// UnloadAll unloads every model the server has in memory and waits until
// /api/ps lists none: its runners and their prompt caches are gone.
func (o *Ollama) UnloadAll(ctx context.Context) error {
	loaded, err := o.Loaded()
	if err != nil {
		return err
	}
	for _, m := range loaded {
		b, _ := json.Marshal(map[string]any{"model": m, "keep_alive": 0})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.URL+"/api/generate", bytes.NewReader(b))
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if loaded, err := o.Loaded(); err == nil && len(loaded) == 0 {
			return nil
		}
	}
	return fmt.Errorf("%s: models still loaded 30 s after unloading", o.Name)
}

// Preload loads model with num_ctx numCtx (as ctxproxy will send it, so
// that its first request does not reload it) without a prompt: the model
// in memory, its cache empty.
func (o *Ollama) Preload(ctx context.Context, model string, numCtx int) error {
	b, _ := json.Marshal(map[string]any{"model": model, "options": map[string]any{"num_ctx": numCtx}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.URL+"/api/generate", bytes.NewReader(b))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: loading %s: HTTP %d: %.200s", o.Name, model, resp.StatusCode, data)
	}
	return nil
}

// Create creates model name on the server from the Modelfile at
// modelfile (its FROM relative to the Modelfile's directory), with the
// server's own ollama binary.
func (o *Ollama) Create(ctx context.Context, name, modelfile string) error {
	cmd := exec.CommandContext(ctx, o.Bin, "create", name, "-f", filepath.Base(modelfile))
	cmd.Dir = filepath.Dir(modelfile)
	cmd.Env = append(os.Environ(), "OLLAMA_HOST="+strings.TrimPrefix(o.URL, "http://"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: ollama create %s: %v\n%s", o.Name, name, err, out)
	}
	return nil
}

// GetJSON decodes the JSON answer of GET url into v; an answer other
// than 200 is an error.
func GetJSON(url string, v any) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
