// Command backends measures ctxproxy's session routing over several real
// Ollama servers (docs/backends.md): three servers on loopback
// (scripts/realollama/start.sh, OLLAMA_NUM_PARALLEL=4 each), the same
// generated model created on each, one ctxproxy with the three as its
// backends:, and concurrent chat sessions replayed through it as a chat UI
// sends them (testkit/fleetbench). It runs the replay once per routing
// (backend.routing: sessions, then round_robin; before each run the
// model is unloaded from every server and loaded again, so that every
// run starts with it in memory and its prompt caches empty) and
// prints a Markdown table: Ollama's prompt time over the second half of
// the turns, the time to first byte, turns lost, and how many sessions
// stayed on one server. It exits 1 when a check fails.
//
//	scripts/backends.sh                          # 12 sessions × 20 turns
//	scripts/backends.sh -sessions 36             # 36 sessions, 12 at a time
//	scripts/backends.sh -kill                    # a server SIGKILLed after turn 10
//	scripts/backends.sh -replicas 3              # three ctxproxy replicas on redis-server
//
// REALOLLAMA_VERSION picks the Ollama build (v0.17.4 by default).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/fleetbench"
	"github.com/ctxproxy/ctxproxy/testkit/loopback"
)

// model is the model created on every server; window its window in
// ctxproxy (and the num_ctx it is loaded with): 20 turns fit whole.
const (
	model  = "bench"
	window = 8192
)

type options struct {
	bin                                 string
	sessions, concurrency, turns, chars int
	replicas                            int
	kill, keep, cold                    bool
	stagger                             time.Duration
	routings                            []string
	target                              float64
}

func main() {
	var o options
	var routing string
	flag.StringVar(&o.bin, "ctxproxy", "ctxproxy", "the ctxproxy binary")
	flag.IntVar(&o.sessions, "sessions", 12, "chat sessions")
	flag.IntVar(&o.concurrency, "concurrency", 12, "sessions at a time")
	flag.IntVar(&o.turns, "turns", 20, "turns of each session")
	flag.IntVar(&o.chars, "user-chars", 120, "mean length of a user message (about a token a character)")
	flag.IntVar(&o.replicas, "replicas", 1, "ctxproxy replicas (above 1: on one redis-server, each session's turns round robin over them)")
	flag.BoolVar(&o.kill, "kill", false, "SIGKILL the server with the most sessions between turns turns/2 and turns/2+1")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (logs, configurations)")
	flag.BoolVar(&o.cold, "cold", false, "start each run with the model unloaded everywhere (else loaded on every server, its cache empty)")
	flag.DurationVar(&o.stagger, "stagger", 250*time.Millisecond, "pause between the starts of two sessions")
	flag.StringVar(&routing, "routing", "sessions,round_robin", "backend.routing values to run, in order")
	flag.Float64Var(&o.target, "target", 0, "most prompt time of sessions over round robin's (0: 0.3 when every session runs at once, else 0.6; negative: none)")
	flag.Parse()
	o.routings = strings.Split(routing, ",")
	if o.target == 0 {
		o.target = 0.3
		if o.sessions > o.concurrency {
			o.target = 0.6
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	failures, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "backends:", err)
		os.Exit(1)
	}
	for _, f := range failures {
		fmt.Println("FAIL:", f)
	}
	if len(failures) > 0 {
		os.Exit(1)
	}
	fmt.Println("PASS")
}

func run(ctx context.Context, o options) ([]string, error) {
	if o.kill && o.sessions > o.concurrency {
		return nil, errors.New("-kill needs every session running at once (-sessions <= -concurrency)")
	}
	dir, err := os.MkdirTemp("", "ctxproxy-backends-")
	if err != nil {
		return nil, err
	}
	if o.keep {
		fmt.Fprintln(os.Stderr, "backends: work directory", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	servers, err := startServers(ctx, dir)
	defer func() {
		for _, s := range servers {
			s.Stop()
		}
	}()
	if err != nil {
		return nil, err
	}
	var redis string
	if o.replicas > 1 {
		addr, stopRedis, err := startRedis(dir)
		if err != nil {
			return nil, err
		}
		defer stopRedis()
		redis = addr
	}

	fmt.Printf("Ollama %s ×3 (OLLAMA_NUM_PARALLEL=4), model %s (%d layers, width %d), %d ctxproxy replica(s), %d CPU cores\n\n",
		servers[0].Version(), model, fleetbench.Shape.Layers, fleetbench.Shape.Embedding, o.replicas, runtime.NumCPU())
	var sums []fleetbench.Summary
	var failures []string
	for i, routing := range o.routings {
		s, f, err := runOnce(ctx, o, servers, dir, redis, routing, i)
		if err != nil {
			return nil, err
		}
		sums = append(sums, s)
		failures = append(failures, f...)
	}
	var ref *fleetbench.Summary
	for i := range sums {
		if strings.HasPrefix(sums[i].Name, "round_robin") {
			ref = &sums[i]
		}
	}
	fleetbench.Table(os.Stdout, sums, ref)
	fmt.Println()
	if ref != nil && sums[0].Name == "sessions" && o.target > 0 && ref.PromptTime > 0 {
		ratio := sums[0].PromptTime.Seconds() / ref.PromptTime.Seconds()
		fmt.Printf("prompt time, sessions over round robin: %.2f× (target ≤ %.2f×)\n", ratio, o.target)
		if ratio > o.target {
			failures = append(failures, fmt.Sprintf("prompt time %.2f× round robin's, over %.2f×", ratio, o.target))
		}
	}
	return failures, nil
}

// startServers starts the three servers and creates the model on each.
func startServers(ctx context.Context, dir string) ([]*fleetbench.Ollama, error) {
	ver := os.Getenv("REALOLLAMA_VERSION")
	if ver == "" {
		ver = "v0.17.4"
	}
	modelfile, err := fleetbench.WriteModel(filepath.Join(dir, "model"), fleetbench.Shape)
	if err != nil {
		return nil, err
	}
	servers := make([]*fleetbench.Ollama, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, name := range []string{"a", "b", "c"} {
		wg.Go(func() {
			s, err := fleetbench.StartOllama(ctx, "scripts/realollama/start.sh", name, filepath.Join(dir, "ollama-"+name),
				[]string{"REALOLLAMA_VERSION=" + ver, "OLLAMA_NUM_PARALLEL=4"}, os.Stderr)
			if err == nil {
				err = s.Create(ctx, model, modelfile)
			}
			servers[i], errs[i] = s, err
		})
	}
	wg.Wait()
	var out []*fleetbench.Ollama
	for _, s := range servers {
		if s != nil {
			out = append(out, s)
		}
	}
	return out, errors.Join(errs...)
}

func startRedis(dir string) (string, func(), error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("-replicas needs redis-server: %w", err)
	}
	port, err := loopback.FreePort()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for range 100 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr, stop, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	return "", nil, errors.New("redis-server did not answer on " + addr)
}

// runOnce replays the sessions with one routing, after restarting any
// server a previous run killed and unloading every model, and returns
// the run's summary and the checks it failed.
func runOnce(ctx context.Context, o options, servers []*fleetbench.Ollama, dir, redis, routing string, n int) (fleetbench.Summary, []string, error) {
	var none fleetbench.Summary
	for _, s := range servers {
		if !s.Alive() {
			if err := s.Restart(ctx); err != nil {
				return none, nil, err
			}
		}
		if err := s.UnloadAll(ctx); err != nil {
			return none, nil, err
		}
		if o.cold {
			continue
		}
		if err := s.Preload(ctx, model, window); err != nil {
			return none, nil, err
		}
	}
	name := routing
	extra := ""
	if redis != "" {
		name += fmt.Sprintf(", %d replicas", o.replicas)
		extra = fmt.Sprintf("snapshots: {store: redis, redis: {addr: %q, prefix: \"run%d:\"}}", redis, n)
	}
	if o.kill {
		name += ", kill"
	}
	var urls []string
	for i := range o.replicas {
		p, err := fleetbench.StartProxy(ctx, o.bin, filepath.Join(dir, fmt.Sprintf("run%d-%s-%d", n, routing, i)),
			fleetbench.Config(servers, routing, model, window, extra))
		if err != nil {
			return none, nil, err
		}
		defer p.Stop()
		urls = append(urls, p.URL)
	}
	plan := fleetbench.Plan{URLs: urls, Model: model, Sessions: o.sessions, Concurrency: o.concurrency, Turns: o.turns,
		UserChars: o.chars, Seed: 1, Stagger: o.stagger, ID: fmt.Sprintf("%s-%d", routing, time.Now().UnixNano())}
	killed := ""
	if o.kill {
		plan.Pause = o.turns / 2
		plan.AtPause = func(done []fleetbench.Turn) { killed = killBusiest(servers, done, plan.Pause) }
	}
	fmt.Fprintf(os.Stderr, "backends: %s: %d sessions × %d turns, %d at a time\n", name, o.sessions, o.turns, o.concurrency)
	start := time.Now()
	turns, err := fleetbench.Run(ctx, plan)
	if err != nil {
		return none, nil, err
	}
	sum := fleetbench.Summarize(name, turns, o.sessions, o.turns, time.Since(start))
	perServer := map[string]int{}
	for _, list := range fleetbench.ServersOf(turns) {
		perServer[list[0]]++
	}
	fmt.Fprintf(os.Stderr, "backends: %s: done in %s; sessions by first server: %v\n", name, sum.Wall.Round(time.Second), perServer)
	if o.keep {
		if b, err := json.MarshalIndent(turns, "", " "); err == nil {
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("run%d-%s.json", n, routing)), b, 0o644)
		}
	}
	return sum, check(o, routing, sum, turns, killed, plan.Pause), nil
}

// killBusiest SIGKILLs the server that served the most sessions' turn
// pause and returns its name.
func killBusiest(servers []*fleetbench.Ollama, done []fleetbench.Turn, pause int) string {
	count := map[string]int{}
	for _, t := range done {
		if t.Turn == pause && t.OK() {
			count[t.Backend]++
		}
	}
	var victim *fleetbench.Ollama
	for _, s := range servers {
		if victim == nil || count[s.Name] > count[victim.Name] {
			victim = s
		}
	}
	fmt.Fprintf(os.Stderr, "backends: SIGKILL to server %s (%d sessions) after turn %d\n", victim.Name, count[victim.Name], pause)
	victim.Kill()
	return victim.Name
}

// check returns what a run fails: a turn lost; with session routing, a
// session whose turns went to two servers (but for the sessions moved
// off a killed server, which must stay on their new one), or every
// session on one server.
func check(o options, routing string, sum fleetbench.Summary, turns []fleetbench.Turn, killed string, pause int) []string {
	var out []string
	if sum.Lost > 0 {
		for _, t := range turns {
			if !t.OK() {
				out = append(out, fmt.Sprintf("%s: session %d turn %d lost: %s", sum.Name, t.Session, t.Turn, t.Err))
			}
		}
	}
	if routing != "sessions" {
		return out
	}
	if sum.Servers < 2 {
		out = append(out, fmt.Sprintf("%s: every session on one server", sum.Name))
	}
	for session, list := range fleetbench.ServersOf(turns) {
		moved := killed != "" && len(list) == 2 && list[0] == killed && list[1] != killed
		if moved {
			for _, t := range turns {
				switch {
				case t.Session != session || t.Turn <= pause:
				case t.Backend == killed:
					out = append(out, fmt.Sprintf("%s: session %d turn %d answered by the killed server", sum.Name, session, t.Turn))
				case t.Turn == pause+1 && t.MovedFrom != killed:
					out = append(out, fmt.Sprintf("%s: session %d turn %d moved to %s without saying so (moved-from=%q)", sum.Name, session, t.Turn, t.Backend, t.MovedFrom))
				}
			}
			continue
		}
		if len(list) != 1 {
			out = append(out, fmt.Sprintf("%s: session %d went to servers %q", sum.Name, session, list))
		}
	}
	return out
}
