//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
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
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/loopback"
)

// ctxproxy is one running ctxproxy binary.
type ctxproxy struct {
	url     string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
}

// startCtxproxy starts the built ctxproxy in front of backend with yaml as
// its config file, waits until /ctxproxy/readyz answers 200 and stops it
// when the test ends. Flags set listen, backend and JSON debug logging; the
// harness sets what it must own through the environment (a private
// snapshots directory, a short shutdown grace, tokens.prepare loaded
// unless the YAML names a prepare key) and passes no other CTXPROXY_*
// variable, so a test's YAML is free to set any other key.
func startCtxproxy(t *testing.T, backend, yaml string) *ctxproxy {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "ctxproxy.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "ctxproxy.log")
	var lastErr error
	// A free port may be taken between freePort and listen; try again.
	for range 3 {
		port, err := loopback.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		p, err := launchCtxproxy(t, dir, cfgPath, logPath, port, backend)
		if err == nil {
			return p
		}
		lastErr = err
	}
	t.Fatalf("ctxproxy did not start: %v\nconfig:\n%s\nlog:\n%s", lastErr, yaml, tail(logPath, 40))
	return nil
}

func launchCtxproxy(t *testing.T, dir, cfgPath, logPath string, port int, backend string) (*ctxproxy, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(suite.bin, "serve", "--config", cfgPath, "--listen", addr, "--backend", backend,
		"--log-format", "json", "--log-level", "debug")
	cmd.Dir = dir
	cmd.Env = append(environWithout("CTXPROXY_"),
		"CTXPROXY_SNAPSHOTS_DIR="+filepath.Join(dir, "data"),
		"CTXPROXY_SHUTDOWN_GRACE=2s")
	if cfg, _ := os.ReadFile(cfgPath); !bytes.Contains(cfg, []byte("prepare:")) {
		// The suite's server holds a hundred generated models: preparing
		// them all at every start of a ctxproxy would only load the
		// machine. Only the loaded ones, unless a test says otherwise.
		cmd.Env = append(cmd.Env, "CTXPROXY_TOKENS_PREPARE=loaded")
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start ctxproxy: %v", err)
	}
	suite.watchdog.add(cmd.Process.Pid)
	p := &ctxproxy{url: "http://" + addr, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("ctxproxy log (last 60 lines):\n%s", tail(logPath, 60))
		}
	})

	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return nil, fmt.Errorf("ctxproxy exited: %v", cmd.ProcessState)
		default:
		}
		resp, err := http.Get(p.url + "/ctxproxy/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.stop()
	return nil, fmt.Errorf("ctxproxy at %s not ready within 20s", p.url)
}

// stop stops ctxproxy's process group, gently first.
func (p *ctxproxy) stop() {
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.exited
	}
	// Anything it started in its group goes too.
	stopGroup(pid, time.Second)
	suite.watchdog.remove(pid)
}

// environWithout is the process environment less the variables with
// prefix, so a developer's CTXPROXY_* settings do not leak into a test.
func environWithout(prefix string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, prefix) {
			env = append(env, kv)
		}
	}
	return env
}

// logRecords returns ctxproxy's JSON log lines decoded.
func (p *ctxproxy) logRecords(t *testing.T) []map[string]any {
	t.Helper()
	f, err := os.Open(p.logPath)
	if err != nil {
		t.Fatalf("ctxproxy log: %v", err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

// logMessages returns the records whose msg contains substr
// (case-insensitive).
func (p *ctxproxy) logMessages(t *testing.T, substr string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, rec := range p.logRecords(t) {
		if msg, _ := rec["msg"].(string); strings.Contains(strings.ToLower(msg), strings.ToLower(substr)) {
			out = append(out, rec)
		}
	}
	return out
}

// get fetches path from ctxproxy and returns the status and body.
func (p *ctxproxy) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(p.url + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, b
}

// metric returns the sum of every series of a Prometheus counter or gauge
// at /metrics, and whether the metric is there at all.
func (p *ctxproxy) metric(t *testing.T, name string) (float64, bool) {
	t.Helper()
	status, body := p.get(t, "/metrics")
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d", status)
	}
	return metricSum(string(body), name)
}

// metricSum adds up the samples of the metric name in a Prometheus text
// exposition; found is false when it has none.
func metricSum(text, name string) (sum float64, found bool) {
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		if rest[0] == '{' {
			i := strings.LastIndexByte(rest, '}')
			if i < 0 {
				continue
			}
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// eventually polls cond until it holds or d passes: ctxproxy calibrates,
// detects and saves sessions after the reply, off the request path.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}
