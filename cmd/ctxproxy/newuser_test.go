package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// TestNewUser drives the installed binary as a newcomer would: install
// it into a fresh GOBIN as README says, ask for help, start it with the
// backend down, then with a backend URL ending in /v1, and read the
// first log lines.
func TestNewUser(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	gobin := t.TempDir()
	install := exec.Command("go", "install", "./cmd/ctxproxy")
	install.Dir = filepath.Join("..", "..")
	install.Env = append(os.Environ(), "GOBIN="+gobin)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install ./cmd/ctxproxy: %v\n%s", err, out)
	}
	bin := filepath.Join(gobin, "ctxproxy")

	help, err := exec.Command(bin, "--help").Output()
	if err != nil {
		t.Fatalf("ctxproxy --help: %v", err)
	}
	for _, cmd := range []string{"serve", "chat", "context", "check-config", "health", "count", "gpu", "version"} {
		if !strings.Contains(string(help), cmd+" ") && !strings.Contains(string(help), cmd+"]") {
			t.Errorf("--help does not list %s:\n%s", cmd, help)
		}
	}
	if out, _ := exec.Command(bin, "help", "count").CombinedOutput(); !strings.Contains(string(out), "-model") {
		t.Errorf("help count shows no flags:\n%s", out)
	}

	// The backend down: a warning, and ctxproxy keeps running.
	down := freeAddr(t)
	lines := startBinary(t, bin, "--backend", "http://"+down)
	for _, want := range []string{"backend does not answer yet", `"msg":"sessions: stored in files","dir":"/`,
		`"msg":"gpu: memory probe chosen"`, "admin API on"} {
		if !lines.has(want) {
			t.Errorf("backend down: the log lacks %q:\n%s", want, lines)
		}
	}
	if lines.has("skipped") {
		t.Errorf("probes that did not apply are logged at info level:\n%s", lines)
	}

	// A /v1 backend URL: normalized, said so, and the backend answers.
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	lines = startBinary(t, bin, "--backend", be.URL+"/v1")
	for _, want := range []string{"ends in /v1", `"msg":"backend answers"`, `"kind":"ollama"`, "models and their windows"} {
		if !lines.has(want) {
			t.Errorf("/v1 backend: the log lacks %q:\n%s", want, lines)
		}
	}
}

// logLines are a started binary's first log lines.
type logLines []string

func (l logLines) has(s string) bool {
	for _, line := range l {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

func (l logLines) String() string { return strings.Join(l, "\n") }

// startBinary runs bin serve on a free port with args and returns its log
// lines up to the admin API line of the start-up checklist; the process
// is stopped when the test ends.
func startBinary(t *testing.T, bin string, args ...string) logLines {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, append([]string{"serve", "--listen", freeAddr(t), "--log-format", "json"}, args...)...)
	cmd.Env = append(os.Environ(), "CTXPROXY_SNAPSHOTS_DIR="+t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	got := make(chan logLines, 1)
	go func() {
		var lines logLines
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.Contains(sc.Text(), "admin API") {
				break
			}
		}
		got <- lines
		for sc.Scan() { // keep draining so the process never blocks
		}
	}()
	select {
	case l := <-got:
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("no start-up checklist within 30 s")
		return nil
	}
}
