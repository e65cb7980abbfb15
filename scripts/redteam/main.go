// Command redteam replays, against the built ctxproxy in front of a real
// Ollama, the probes that once found ctxproxy wanting: replies cut short,
// bodies counted otherwise than Ollama runs them, a scoped session reached
// without its credential, a corrupt record taken for a torn tail, idle
// connections that lock everyone out, a browser that cannot name its
// session, a password in the profiler's command line. Each probe prints
// one line, PASS or FAIL with what it saw; the exit status is 1 when any
// fails. scripts/redteam.sh builds and starts everything; loopback only.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/loopback"
)

func main() {
	bin := flag.String("ctxproxy", "", "the ctxproxy binary")
	ollama := flag.String("ollama", "", "the real Ollama's URL (loopback)")
	ollamaBin := flag.String("ollama-bin", "", "the ollama binary, for its CLI")
	pulls := flag.Int("pulls", 300, "ollama pulls of a missing model through ctxproxy")
	flag.Parse()
	u, err := url.Parse(*ollama)
	if err != nil || *bin == "" || *ollamaBin == "" || !isLoopback(u.Hostname()) {
		fmt.Fprintln(os.Stderr, "usage: redteam -ctxproxy BIN -ollama http://127.0.0.1:PORT -ollama-bin BIN [-pulls N]")
		os.Exit(2)
	}
	r := &run{bin: *bin, ollama: *ollama, ollamaBin: *ollamaBin}
	probes := []struct {
		name string
		fn   func() error
	}{
		{fmt.Sprintf("%d ollama pulls of a missing model end as direct", *pulls), func() error { return r.pulls(*pulls) }},
		{"a body naming messages twice is counted as Ollama evaluates it", r.names},
		{"a scoped session needs its credential", r.scope},
		{"a corrupt record mid-log is set aside, the later turns kept", r.corrupt},
		{"idle keep-alive connections make room at the cap", r.idle},
		{"a browser may name its session and read the answers", r.cors},
		{"the profiler's command line hides the backend's password", r.pprof},
	}
	failed := 0
	for _, p := range probes {
		start := time.Now()
		err := p.fn()
		status := "PASS"
		if err != nil {
			status, failed = "FAIL", failed+1
		}
		fmt.Printf("%s  %-66s %6s", status, p.name, time.Since(start).Round(100*time.Millisecond))
		if err != nil {
			fmt.Printf("  %v", err)
		}
		fmt.Println()
	}
	r.stopAll()
	if failed > 0 {
		fmt.Printf("%d of %d probes failed\n", failed, len(probes))
		os.Exit(1)
	}
}

// run holds what the probes share: the binaries, the real Ollama, and the
// ctxproxy processes to stop at the end.
type run struct {
	bin, ollama, ollamaBin string
	procs                  []*proxy
}

// proxy is a running ctxproxy.
type proxy struct {
	bin, url, dir string
	cmd           *exec.Cmd
	args          []string
}

// start runs ctxproxy in front of backend with the YAML config and extra
// flags, in a directory of its own, and waits until it is ready.
func (r *run) start(backend, yaml string, flags ...string) (*proxy, error) {
	dir, err := os.MkdirTemp("", "redteam-")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "ctxproxy.yaml"), []byte(yaml), 0o644); err != nil {
		return nil, err
	}
	port, err := loopback.FreePort()
	if err != nil {
		return nil, err
	}
	p := &proxy{bin: r.bin, url: fmt.Sprintf("http://127.0.0.1:%d", port), dir: dir,
		args: append([]string{"serve", "--config", filepath.Join(dir, "ctxproxy.yaml"),
			"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--backend", backend, "--log-level", "error"}, flags...)}
	r.procs = append(r.procs, p)
	return p, p.launch()
}

func (p *proxy) launch() error {
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Dir = p.dir
	p.cmd.Env = append(os.Environ(), "CTXPROXY_SNAPSHOTS_DIR="+filepath.Join(p.dir, "data"), "CTXPROXY_SHUTDOWN_GRACE=2s")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	for range 200 {
		if resp, err := http.Get(p.url + "/ctxproxy/healthz"); err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("ctxproxy at %s did not start", p.url)
}

// stop ends ctxproxy gently, so its queued session writes are stored.
func (p *proxy) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	p.cmd = nil
}

func (r *run) stopAll() {
	for _, p := range r.procs {
		p.stop()
		os.RemoveAll(p.dir)
	}
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// cli runs the ollama CLI against host and returns its exit code and the
// last line it printed.
func (r *run) cli(host, dir string, args ...string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.ollamaBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OLLAMA_HOST="+strings.TrimPrefix(host, "http://"), "TERM=dumb")
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		return 0, "", err
	}
	last := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.LastIndexByte(line, '\r'); i >= 0 {
			line = line[i+1:]
		}
		line = strings.TrimSpace(strings.Map(func(c rune) rune {
			if c == 0x1b || c < 0x20 {
				return -1
			}
			return c
		}, line))
		if line != "" {
			last = line
		}
	}
	return code, last, nil
}

// pulls: a streamed pass-through answer (the pull's error line) must
// reach the client every time.
func (r *run) pulls(n int) error {
	registry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}`)
	}))
	defer registry.Close()
	p, err := r.start(r.ollama, "")
	if err != nil {
		return err
	}
	model := strings.TrimPrefix(registry.URL, "http://") + "/library/missing:latest"
	dir := os.TempDir()
	wantCode, want, err := r.cli(r.ollama, dir, "pull", "--insecure", model)
	if err != nil || wantCode == 0 {
		return fmt.Errorf("direct: exit %d %q %v", wantCode, want, err)
	}
	for i := range n {
		code, got, err := r.cli(p.url, dir, "pull", "--insecure", model)
		if err != nil || code != wantCode || got != want {
			return fmt.Errorf("run %d: exit %d %q (%v); direct: exit %d %q", i, code, got, err, wantCode, want)
		}
	}
	return nil
}

// post sends a JSON body with headers and returns the response, read.
func post(u, body string, hdr map[string]string) (*http.Response, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// turns are n alternating user and assistant messages of some hundreds of
// bytes, as JSON.
func turns(n int) string {
	var msgs []map[string]string
	for i := range n {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role,
			"content": fmt.Sprintf("turn %d: %s", i, strings.Repeat("the quick brown fox jumps over the lazy dog ", 8))})
	}
	b, _ := json.Marshal(msgs)
	return string(b)
}

// names: Ollama reads "Messages" after "messages" as the messages.
func (r *run) names() error {
	p, err := r.start(r.ollama, "")
	if err != nil {
		return err
	}
	body := `{"model":"tiny","stream":false,"messages":[{"role":"user","content":"hi"}],"Messages":` + turns(13) + `}`
	resp, b, err := post(p.url+"/api/chat", body, nil)
	if err != nil {
		return err
	}
	var reply struct {
		PromptEvalCount int `json:"prompt_eval_count"`
	}
	if err := json.Unmarshal(b, &reply); err != nil || resp.StatusCode != 200 {
		return fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	if sent := resp.Header.Get("X-Ctxproxy-Tokens"); sent != fmt.Sprint(reply.PromptEvalCount) {
		return fmt.Errorf("ctxproxy counted %s tokens, Ollama evaluated %d", sent, reply.PromptEvalCount)
	}
	return nil
}

// scope: a session made under credential A is out of reach without it.
func (r *run) scope() error {
	p, err := r.start(r.ollama, "session:\n  accumulate: true\n")
	if err != nil {
		return err
	}
	chat := func(id, text string, hdr map[string]string) (*http.Response, error) {
		h := map[string]string{"X-Session-ID": id}
		for k, v := range hdr {
			h[k] = v
		}
		resp, _, err := post(p.url+"/api/chat", `{"model":"tiny","stream":false,"messages":[{"role":"user","content":"`+text+`"}]}`, h)
		return resp, err
	}
	resp, err := chat("shared", "a secret", map[string]string{"Authorization": "Bearer key-a"})
	if err != nil {
		return err
	}
	scoped := resp.Header.Get("X-Ctxproxy-Session")
	for _, h := range []map[string]string{nil, {"Authorization": ""}} {
		resp, err := chat(scoped, "what was said?", h)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusForbidden {
			return fmt.Errorf("no credential naming %q: %d, want 403", scoped, resp.StatusCode)
		}
	}
	a, err := chat("sdk", "one", map[string]string{"X-Api-Key": "sk-ant-1"})
	if err != nil {
		return err
	}
	b, err := chat("sdk", "two", map[string]string{"X-Api-Key": "sk-ant-2"})
	if err != nil {
		return err
	}
	if a.Header.Get("X-Ctxproxy-Session") == b.Header.Get("X-Ctxproxy-Session") {
		return errors.New("two X-Api-Key callers share one session")
	}
	return nil
}

// corrupt: a damaged length field in the middle of a session log costs
// that record only.
func (r *run) corrupt() error {
	p, err := r.start(r.ollama, "")
	if err != nil {
		return err
	}
	const id = "rt-corrupt"
	history := []map[string]string{}
	for i := range 6 {
		history = append(history, map[string]string{"role": "user", "content": fmt.Sprintf("question %d", i)})
		b, _ := json.Marshal(map[string]any{"model": "tiny", "stream": false, "messages": history})
		resp, reply, err := post(p.url+"/api/chat", string(b), map[string]string{"X-Session-ID": id})
		if err != nil || resp.StatusCode != 200 {
			return fmt.Errorf("turn %d: %v %s", i, err, reply)
		}
		var m struct {
			Message map[string]string `json:"message"`
		}
		json.Unmarshal(reply, &m)
		history = append(history, map[string]string{"role": "assistant", "content": m.Message["content"]})
	}
	p.stop()
	sum := sha256.Sum256([]byte(id))
	path := filepath.Join(p.dir, "data", "sessions", hex.EncodeToString(sum[:])+".log")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	// The third record's length field points far past the end. A log is
	// a line naming its format, then frames of a 4-byte length, a 4-byte
	// checksum and the record.
	off := bytes.IndexByte(data, '\n') + 1
	for range 2 {
		off += 8 + int(binary.LittleEndian.Uint32(data[off:]))
	}
	binary.LittleEndian.PutUint32(data[off:], 1<<29)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	if err := p.launch(); err != nil {
		return err
	}
	resp, err := http.Get(p.url + "/ctxproxy/sessions/" + id + "/export")
	if err != nil {
		return err
	}
	var exp struct {
		Messages []struct{ Content string } `json:"messages"`
	}
	json.NewDecoder(resp.Body).Decode(&exp)
	resp.Body.Close()
	if n := len(exp.Messages); n < 10 || !strings.Contains(exp.Messages[n-2].Content, "question 5") {
		return fmt.Errorf("%d messages after the repair, the last turn missing", n)
	}
	copies, _ := filepath.Glob(path + ".corrupt-*")
	if len(copies) != 1 {
		return fmt.Errorf("%d copies of the damaged log", len(copies))
	}
	resp, err = http.Get(p.url + "/ctxproxy/readyz")
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "corrupt session record") {
		return fmt.Errorf("readyz does not tell: %q", b)
	}
	return nil
}

// idle: ten idle keep-alive connections at max_connections 10 do not
// lock out a health check.
func (r *run) idle() error {
	p, err := r.start(r.ollama, "limits:\n  max_connections: 10\n")
	if err != nil {
		return err
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 10 {
		c, err := net.Dial("tcp", strings.TrimPrefix(p.url, "http://"))
		if err != nil {
			return err
		}
		held = append(held, c)
		fmt.Fprintf(c, "GET /ctxproxy/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			return err
		}
	}
	time.Sleep(1500 * time.Millisecond) // idle longer than a burst's pause
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for _, path := range []string{"/ctxproxy/healthz", "/ctxproxy/readyz"} {
		resp, err := client.Get(p.url + path)
		if err != nil {
			return fmt.Errorf("%s at the cap: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s at the cap: %d", path, resp.StatusCode)
		}
	}
	return nil
}

// cors: a page on localhost may send X-Session-ID and read X-Ctxproxy-*.
func (r *run) cors() error {
	p, err := r.start(r.ollama, "")
	if err != nil {
		return err
	}
	req, _ := http.NewRequest(http.MethodOptions, p.url+"/api/chat", nil)
	req.Header.Set("Origin", "http://localhost:3000")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "content-type,x-session-id")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if allowed := strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers")); resp.StatusCode >= 300 || !strings.Contains(allowed, "x-session-id") {
		return fmt.Errorf("preflight: %d, Access-Control-Allow-Headers %q", resp.StatusCode, allowed)
	}
	resp, _, err = post(p.url+"/api/chat", `{"model":"tiny","stream":false,"messages":[{"role":"user","content":"hi"}]}`,
		map[string]string{"Origin": "http://localhost:3000", "X-Session-ID": "browser"})
	if err != nil {
		return err
	}
	if exposed := resp.Header.Get("Access-Control-Expose-Headers"); !strings.Contains(exposed, "X-Ctxproxy-Session") {
		return fmt.Errorf("Access-Control-Expose-Headers %q", exposed)
	}
	return nil
}

// pprof: the profiler's view of the command line hides the password of
// the backend URL.
func (r *run) pprof() error {
	port, err := loopback.FreePort()
	if err != nil {
		return err
	}
	u, _ := url.Parse(r.ollama)
	u.User = url.UserPassword("admin", "s3cret-password")
	if _, err := r.start(u.String(), "", "--pprof", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		return err
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/cmdline", port))
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "s3cret-password") || !strings.Contains(string(b), "--backend") {
		return fmt.Errorf("cmdline: %q", b)
	}
	return nil
}
