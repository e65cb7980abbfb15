//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/fleetbench"
	"github.com/ctxproxy/ctxproxy/testkit/loopback"
)

// suite is what TestMain sets up once for every test.
var suite struct {
	// repo is the module root; bin the ctxproxy binary built from it.
	repo, bin string
	// ollama is the real server; nil when setup failed (see unavailable).
	ollama *ollamaServer
	// version is the real server's, as its /api/version says
	// (REALOLLAMA_VERSION chooses it).
	version string
	// unavailable says why the real Ollama could not be started: tests
	// skip with it, or fail when CI is set.
	unavailable string
	// broken is a setup failure that no environment excuses (ctxproxy
	// does not build): tests fail with it.
	broken string
	// watchdog stops every registered process group if this process dies
	// without running its cleanups (a panic, a kill).
	watchdog *watchdog
}

// Environment variables the suite reads.
const (
	// envRealOllamaDir names a directory with a start.sh of one's own,
	// used in place of scripts/realollama/start.sh.
	envRealOllamaDir = "REALOLLAMA_DIR"
	// envCI makes a missing or unbuildable Ollama a failure, not a skip.
	envCI = "CI"
	// envWatchdog turns the test binary into the watchdog process.
	envWatchdog = "CTXPROXY_E2E_WATCHDOG"
)

// ollamaStartTimeout bounds start.sh: the first run builds Ollama from the
// Go module proxy (about three minutes on two idle cores, more on busy ones).
const ollamaStartTimeout = 25 * time.Minute

func TestMain(m *testing.M) {
	if os.Getenv(envWatchdog) == "1" {
		os.Exit(runWatchdog(os.Stdin))
	}
	os.Exit(runSuite(m))
}

// runSuite sets up, runs the tests and tears down; a function of its own so
// that the deferred teardown runs before os.Exit.
func runSuite(m *testing.M) int {
	wd, err := startWatchdog()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	suite.watchdog = wd
	defer wd.close()

	tmp, err := os.MkdirTemp("", "ctxproxy-e2e-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	wd.removeDir(tmp)

	if err := buildCtxproxy(tmp); err != nil {
		suite.broken = err.Error()
	} else if o, err := startOllama(tmp); err != nil {
		suite.unavailable = err.Error()
	} else {
		suite.ollama = o
		defer o.stop()
		suite.version = o.version()
		fmt.Fprintf(os.Stderr, "e2e: Ollama %s\n", suite.version)
	}
	code := m.Run()
	if code != 0 && suite.ollama != nil {
		fmt.Fprintf(os.Stderr, "e2e: last lines of the Ollama log %s:\n%s\n", suite.ollama.logPath, tail(suite.ollama.logPath, 40))
	}
	return code
}

// need returns the real Ollama, or ends the test: it skips when Ollama is
// unavailable outside CI, and fails in CI or when ctxproxy did not build.
func need(t *testing.T) *ollamaServer {
	t.Helper()
	switch {
	case suite.broken != "":
		t.Fatalf("setup: %s", suite.broken)
	case suite.unavailable != "" && os.Getenv(envCI) != "":
		t.Fatalf("setup (CI is set, so a missing real Ollama is a failure): %s", suite.unavailable)
	case suite.unavailable != "":
		t.Skipf("no real Ollama: %s (set CI=1 to make this a failure)", suite.unavailable)
	}
	return suite.ollama
}

// findRepo walks up from the working directory to the module root.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// findStartScript locates the script that starts a real Ollama:
// $REALOLLAMA_DIR/start.sh when set, else the repository's own
// scripts/realollama/start.sh.
func findStartScript() (string, error) {
	dir := filepath.Join(suite.repo, "scripts", "realollama")
	if d := os.Getenv(envRealOllamaDir); d != "" {
		dir = d
	}
	p := filepath.Join(dir, "start.sh")
	if !isExecutable(p) {
		return "", fmt.Errorf("%s is not an executable start.sh", p)
	}
	return p, nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// buildCtxproxy builds the binary under test into dir.
func buildCtxproxy(dir string) error {
	repo, err := findRepo()
	if err != nil {
		return err
	}
	suite.repo = repo
	suite.bin = filepath.Join(dir, "ctxproxy")
	cmd := exec.Command("go", "build", "-o", suite.bin, "./cmd/ctxproxy")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/ctxproxy: %v\n%s", err, out)
	}
	return nil
}

// startOllama runs start.sh on a free port, with env added to its
// environment. OLLAMA_DEBUG=1 makes the log
// name each reload ("reloading") and each dropped message ("truncating
// input messages ..."), which the scenarios count; a long keep-alive keeps
// an idle unload from looking like a reload.
func startOllama(tmp string, env ...string) (*ollamaServer, error) {
	script, err := findStartScript()
	if err != nil {
		return nil, err
	}
	port, err := loopback.FreePort()
	if err != nil {
		return nil, err
	}
	work := filepath.Join(tmp, "ollama")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ollamaStartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, strconv.Itoa(port), work)
	cmd.Env = append(append(os.Environ(), "OLLAMA_DEBUG=1", "OLLAMA_KEEP_ALIVE=1h", "OLLAMA_NUM_PARALLEL=1"), env...)
	// start.sh and the go build it may run form one group, so a timeout
	// stops the whole build.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	// The build's progress (minutes, on a fresh machine) shows as it runs.
	cmd.Stderr = prefixWriter("realollama: ", os.Stderr)
	fmt.Fprintf(os.Stderr, "e2e: starting a real Ollama with %s %d (the first run builds it)\n", script, port)
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %v", script, err)
	}
	vars := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			vars[k] = v
		}
	}
	pgid, err := strconv.Atoi(vars["OLLAMA_PGID"])
	if err != nil || vars["OLLAMA_URL"] == "" || vars["OLLAMA_LOG"] == "" {
		return nil, fmt.Errorf("%s printed no OLLAMA_URL, OLLAMA_PGID and OLLAMA_LOG:\n%s", script, out)
	}
	suite.watchdog.add(pgid)
	o := &ollamaServer{url: vars["OLLAMA_URL"], pgid: pgid, logPath: vars["OLLAMA_LOG"], models: vars["OLLAMA_MODELS"]}
	fmt.Fprintf(os.Stderr, "e2e: Ollama at %s (pgid %d, log %s) after %s\n", o.url, pgid, o.logPath, time.Since(start).Round(time.Second))
	return o, nil
}

// stopGroup sends SIGTERM to a process group, waits up to grace for it to
// go, then SIGKILLs what is left. Ollama's serve starts runner children
// that outlive a plain kill of serve: only the group takes them all.
func stopGroup(pgid int, grace time.Duration) {
	if pgid <= 1 {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	if fleetbench.WaitGone(pgid, grace) {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	fleetbench.WaitGone(pgid, 5*time.Second)
}

// watchdog is a second process (this test binary, re-executed) that holds
// the read end of a pipe. The suite registers each process group it starts
// and unregisters it once stopped; when this process dies in any way, even
// by a panic in a test or SIGKILL, the pipe closes and the watchdog stops
// the groups still registered, so no Ollama runner outlives the suite.
type watchdog struct {
	mu  sync.Mutex
	w   io.WriteCloser
	cmd *exec.Cmd
}

func startWatchdog() (*watchdog, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envWatchdog+"=1")
	// Its own group: a Ctrl-C to the terminal's group must not stop it
	// before it has stopped the others.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = os.Stderr
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	return &watchdog{w: w, cmd: cmd}, nil
}

func (wd *watchdog) send(line string) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	_, _ = io.WriteString(wd.w, line+"\n")
}

// add registers a process group for the watchdog to stop.
func (wd *watchdog) add(pgid int) { wd.send("+" + strconv.Itoa(pgid)) }

// remove unregisters a group that has been stopped, so that a later
// process reusing the id is left alone.
func (wd *watchdog) remove(pgid int) { wd.send("-" + strconv.Itoa(pgid)) }

// removeDir has the watchdog remove dir after stopping the groups, when
// this process could not.
func (wd *watchdog) removeDir(dir string) { wd.send("d" + dir) }

// close ends the watchdog after a clean teardown.
func (wd *watchdog) close() {
	wd.mu.Lock()
	_ = wd.w.Close()
	wd.mu.Unlock()
	done := make(chan struct{})
	go func() { _ = wd.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = wd.cmd.Process.Kill()
	}
}

// runWatchdog is the watchdog process: it reads "+PGID", "-PGID" and
// "dPATH" lines until its stdin closes, then stops the groups still
// registered and removes the directories, which a clean teardown has
// already removed.
func runWatchdog(r io.Reader) int {
	groups := map[int]bool{}
	var dirs []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if len(line) < 2 {
			continue
		}
		if line[0] == 'd' {
			dirs = append(dirs, line[1:])
			continue
		}
		pgid, err := strconv.Atoi(line[1:])
		if err != nil {
			continue
		}
		switch line[0] {
		case '+':
			groups[pgid] = true
		case '-':
			delete(groups, pgid)
		}
	}
	defer func() {
		for _, d := range dirs {
			_ = os.RemoveAll(d)
		}
	}()
	var wg sync.WaitGroup
	for pgid := range groups {
		fmt.Fprintf(os.Stderr, "e2e watchdog: the suite ended without stopping process group %d; stopping it\n", pgid)
		wg.Go(func() { stopGroup(pgid, 5*time.Second) })
	}
	wg.Wait()
	return 0
}

// prefixWriter prefixes each line written to w.
func prefixWriter(prefix string, w io.Writer) io.Writer {
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fmt.Fprintf(w, "%s%s\n", prefix, sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	return pw
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
