// Command bench is the driver of scripts/bench.sh: it starts the fake
// backend, a bare httputil.ReverseProxy (scripts/bench/bare, with and
// without a JSON decode and re-encode) and ctxproxy, drives each with wrk
// in interleaved rounds, and prints one table of ratios ctxproxy/bare.
// With -scale it prints the cost curve against conversation length and
// against the number of stored sessions instead (scale.go).
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

type options struct {
	bin, dir        string
	rounds          int
	duration        time.Duration
	threads, conns  int
	streamN         int
	latencyN        int
	basePort        int
	scale, sessions string
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "", "directory holding the built ctxproxy, bare and fakeserver")
	flag.StringVar(&o.dir, "dir", "", "scratch directory (logs, bodies, session store)")
	flag.IntVar(&o.rounds, "rounds", 5, "interleaved rounds")
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "wrk run per target, workload and round (whole seconds)")
	flag.IntVar(&o.threads, "threads", 2, "wrk threads")
	flag.IntVar(&o.conns, "conns", 10, "wrk connections")
	flag.IntVar(&o.streamN, "stream", 50, "streamed requests per target and round")
	flag.IntVar(&o.latencyN, "latency", 300, "unloaded 100 KB requests per target and round, the targets in turn")
	flag.IntVar(&o.basePort, "port", 11690, "first of the loopback ports the harness uses")
	flag.StringVar(&o.scale, "scale", "", "print the scale curve instead: message counts, e.g. 10,100,1000")
	flag.StringVar(&o.sessions, "sessions", "1,1000,100000", "with -scale: stored session counts")
	flag.Parse()
	if o.bin == "" || o.dir == "" {
		fmt.Fprintln(os.Stderr, "bench: -bin and -dir are required (run scripts/bench.sh)")
		os.Exit(2)
	}
	if o.duration < time.Second {
		o.duration = time.Second
	}
	var err error
	if o.scale != "" {
		err = runScale(o)
	} else {
		err = runTable(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// chatBody is an Ollama chat request of n messages of about size bytes
// of content each, after a system prompt.
func chatBody(model string, n, size int, stream bool) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"model":%q,"stream":%t,"options":{"temperature":0.2},"messages":[{"role":"system","content":"You are a helpful assistant."}`, model, stream)
	for i := range n {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		phrase := fmt.Sprintf("message %d says something useful. ", i)
		fmt.Fprintf(&b, `,{"role":%q,"content":%q}`, role, strings.Repeat(phrase, max(1, size/len(phrase))))
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

const smallChat = `{"model":"llama3.1:8b","stream":false,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Write one sentence about the sea, please; keep it short and plain."}]}`

// servers are the processes of one harness run.
type servers struct {
	fake, bare, bareJSON, ctx *proc
}

func (s servers) stop() {
	for _, p := range []*proc{s.ctx, s.bareJSON, s.bare, s.fake} {
		p.stop()
	}
}

// ctxproxyConfig is the configuration the harness runs ctxproxy with:
// defaults, but a small window for the model "bench-small" so that its
// requests must be cut, and the session store in the scratch directory.
func ctxproxyConfig(dir, listen, backend, store string) (string, error) {
	path := filepath.Join(dir, "ctxproxy.yaml")
	cfg := fmt.Sprintf(`listen: %s
backend: {url: "http://%s"}
snapshots: {dir: %q}
log: {level: error, format: json}
models:
  bench-small: {max_tokens: 8192, max_output_tokens: 1024}
`, listen, backend, store)
	return path, os.WriteFile(path, []byte(cfg), 0o644)
}

func startAll(o options, store string) (servers, error) {
	var s servers
	var err error
	port := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", o.basePort+i) }
	s.fake, err = start("fake backend", port(0), filepath.Join(o.dir, "fake.log"), filepath.Join(o.bin, "fakeserver"),
		"-listen", port(0), "-chunks", "20", "-chunk-delay", "1ms",
		"-reply", strings.Repeat("The sea is wide and calm today. ", 8))
	if err != nil {
		return s, err
	}
	if s.bare, err = start("bare", port(1), filepath.Join(o.dir, "bare.log"), filepath.Join(o.bin, "bare"),
		"-listen", port(1), "-backend", "http://"+port(0)); err != nil {
		s.stop()
		return s, err
	}
	if s.bareJSON, err = start("bare+json", port(2), filepath.Join(o.dir, "bare-json.log"), filepath.Join(o.bin, "bare"),
		"-listen", port(2), "-backend", "http://"+port(0), "-json"); err != nil {
		s.stop()
		return s, err
	}
	cfg, err := ctxproxyConfig(o.dir, port(3), port(0), store)
	if err != nil {
		s.stop()
		return s, err
	}
	if s.ctx, err = start("ctxproxy", port(3), filepath.Join(o.dir, "ctxproxy.log"), filepath.Join(o.bin, "ctxproxy"),
		"serve", "--config", cfg); err != nil {
		s.stop()
		return s, err
	}
	return s, nil
}

// warm sends each workload a few times through p, so that the first
// measured request finds counts cached and model facts fetched.
func warm(client *http.Client, p *proc, ws []workload) error {
	for _, w := range ws {
		for range 5 {
			req, err := http.NewRequest(w.method, "http://"+p.addr+w.path, strings.NewReader(string(w.body)))
			if err != nil {
				return err
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s %s via %s: %s", w.method, w.path, p.name, resp.Status)
			}
		}
	}
	return nil
}
