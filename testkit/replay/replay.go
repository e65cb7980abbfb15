// Package replay replays a long chat against a real Ollama the way a chat
// UI sends it — the whole history on every turn, the model's own replies
// kept — once through ctxproxy per strategy, once through a per-turn
// trimmer and once to Ollama alone, and reports what the backend spent
// reading prompts. Ollama reads only what follows the longest prefix a
// prompt shares with the previous one, so the prompt time is the measure
// of how well a strategy keeps the backend's prompt cache warm.
//
// Between ctxproxy (or the client, for Ollama alone) and Ollama sits a
// recorder: it sees every prompt forwarded, so it can tell where the
// forwarded prefix moved (a cut), whether a summary was forwarded, and
// how many summarizer calls reached the backend.
package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Paths besides the strategies of ctxproxy.
const (
	// Alone sends the chat to Ollama directly, with num_ctx set to the
	// window: Ollama's own truncation.
	Alone = "ollama"
	// PerTurn is a per-turn trimmer: ctxproxy's token_budget with the
	// threshold equal to the target, so that the cut moves on every turn
	// once the conversation is full, as trim-to-fit libraries do.
	PerTurn = "trimmer"
)

// Modes are ctxproxy's strategies that drop or fold messages.
var Modes = []string{"smart", "summarize", "hybrid", "sliding_window", "token_budget", "selective", "importance", "mask", "composite"}

// Config is one replay.
type Config struct {
	// Ollama is the real server's base URL.
	Ollama string
	// Bin is the ctxproxy binary.
	Bin string
	// Model is the model chatted with ("tiny").
	Model string
	// Turns is how many user turns are sent; Window the model's context
	// window (models.<model>.max_tokens, and num_ctx for Ollama alone).
	Turns, Window int
	// Paths are what to replay: Alone, PerTurn and modes of ctxproxy.
	Paths []string
	// UserChars is the mean length of a user message; Seed makes the
	// chat (every path replays the same user messages).
	UserChars int
	Seed      uint64
	// Think is the pause between a reply and the next turn.
	Think time.Duration
	// Strategy is added to the strategy: section of every ctxproxy but
	// the per-turn trimmer's, in YAML flow style ("threshold: 0.9,
	// target: 0.7"); YAML is added to every configuration.
	Strategy, YAML string
	// Dir holds the configurations, data and logs of the ctxproxy
	// processes.
	Dir string
	// Log receives progress lines, and with Verbose a line a turn; nil
	// discards them.
	Log     io.Writer
	Verbose bool
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Turn is what one turn cost and what was forwarded.
type Turn struct {
	// Wall is the client's wait, from sending to the end of the reply.
	Wall time.Duration
	// PromptEval is Ollama's prompt_eval_duration: the time spent reading
	// the part of the prompt its cache did not hold.
	PromptEval time.Duration
	// Load is Ollama's load_duration (a model reload shows here).
	Load time.Duration
	// Evaluated is Ollama's prompt_eval_count (the whole prompt, cached
	// or not); Forwarded is X-Ctxproxy-Tokens, or Evaluated for Ollama
	// alone; Limit is X-Ctxproxy-Limit (the window for Ollama alone).
	Evaluated, Forwarded, Limit int
	// Cached is Ollama's prompt_eval_cached_count (0.30 and later): the
	// prompt tokens it took from its cache; -1 when it does not say.
	Cached int
	// Kept is the share of the forwarded prompt's text that the previous
	// forwarded prompt began with; Cut is set when the previous
	// forwarded prompt is not a prefix of this one.
	Kept float64
	Cut  bool
	// Summary is set when the forwarded prompt holds a summary block.
	Summary bool
}

// Result is one path's replay.
type Result struct {
	Path  string
	Turns []Turn
	// SummarizerCalls is how many summarizer calls reached the backend.
	SummarizerCalls int
}

// Half is a Result summed over its second half of turns.
type Half struct {
	PromptTime, Wall time.Duration
	// MeanForwarded is the mean of Forwarded; MeanShare that mean as a
	// share of the limit.
	MeanForwarded float64
	MeanShare     float64
	Cuts          int
	// MeanKept is the mean of Kept; MeanCached the mean share of the
	// prompt the backend took from its cache (-1 when it did not say).
	MeanKept, MeanCached float64
	// Reloads counts turns whose load_duration shows a model load
	// (over 100 ms).
	Reloads int
}

// SecondHalf sums the second half of r's turns.
func (r Result) SecondHalf() Half {
	var h Half
	turns := r.Turns[len(r.Turns)/2:]
	if len(turns) == 0 {
		return h
	}
	var fwd, share, kept, cached float64
	said := 0
	for _, t := range turns {
		if t.Cached >= 0 && t.Evaluated > 0 {
			cached += float64(t.Cached) / float64(t.Evaluated)
			said++
		}
		h.PromptTime += t.PromptEval
		h.Wall += t.Wall
		fwd += float64(t.Forwarded)
		if t.Limit > 0 {
			share += float64(t.Forwarded) / float64(t.Limit)
		}
		kept += t.Kept
		if t.Cut {
			h.Cuts++
		}
		if t.Load > 100*time.Millisecond {
			h.Reloads++
		}
	}
	n := float64(len(turns))
	h.MeanForwarded, h.MeanShare, h.MeanKept = fwd/n, share/n, kept/n
	h.MeanCached = -1
	if said > 0 {
		h.MeanCached = cached / float64(said)
	}
	return h
}

// FirstSummary is the first turn (from 1) whose forwarded prompt held a
// summary, and Unsummarized how many turns after it forwarded none.
func (r Result) FirstSummary() (first, unsummarized int) {
	for i, t := range r.Turns {
		switch {
		case first == 0 && t.Summary:
			first = i + 1
		case first > 0 && !t.Summary:
			unsummarized++
		}
	}
	return first, unsummarized
}

// Run replays cfg.Paths in order and returns their results; ctx ends it
// early with the results so far.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	msgs := UserMessages(cfg.Turns, cfg.UserChars, cfg.Seed)
	var out []Result
	for _, path := range cfg.Paths {
		start := time.Now()
		r, err := replayPath(ctx, cfg, path, msgs)
		if err != nil {
			return out, fmt.Errorf("replay %s: %w", path, err)
		}
		h := r.SecondHalf()
		fmt.Fprintf(cfg.Log, "replay: %-14s prompt %6.2fs  wall %6.2fs  forwarded %5.0f  cuts %2d  summarizer calls %d  (%s)\n",
			path, h.PromptTime.Seconds(), h.Wall.Seconds(), h.MeanForwarded, h.Cuts, r.SummarizerCalls,
			time.Since(start).Round(time.Second))
		out = append(out, r)
	}
	return out, nil
}

func replayPath(ctx context.Context, cfg Config, path string, users []string) (Result, error) {
	rec, err := startRecorder(cfg.Ollama)
	if err != nil {
		return Result{}, err
	}
	defer rec.close()
	base, limitHeader := rec.url, false
	if path != Alone {
		p, err := startProxy(ctx, cfg, path, rec.url)
		if err != nil {
			return Result{}, err
		}
		defer p.stop()
		base, limitHeader = p.url, true
	}
	res := Result{Path: path}
	session := fmt.Sprintf("replay-%s-%d", path, time.Now().UnixNano())
	system := "You are a helpful assistant. Answer briefly."
	history := []message{{Role: "system", Content: system}}
	prev := ""
	for i, u := range users {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		history = append(history, message{Role: "user", Content: u})
		reply, turn, err := send(ctx, base, session, cfg, history, limitHeader)
		if err != nil {
			return res, fmt.Errorf("turn %d: %w", i+1, err)
		}
		fwd, ok := rec.take()
		if !ok {
			return res, fmt.Errorf("turn %d: the recorder saw no chat request (%s)", i+1, logOf(cfg, path))
		}
		turn.Summary = strings.Contains(fwd, "<conversation_summary>")
		if prev != "" {
			n := commonPrefix(prev, fwd)
			turn.Kept = float64(n) / float64(max(len(fwd), 1))
			turn.Cut = n < len(prev)
		}
		// What the backend's cache holds when the next turn arrives.
		prev = fwd + "\x00assistant\x00" + reply
		res.Turns = append(res.Turns, turn)
		if cfg.Verbose {
			fmt.Fprintf(cfg.Log, "replay: %s turn %2d: wall %4.0f ms  prompt %4.0f ms  load %4.0f ms  evaluated %5d  forwarded %5d/%d  kept %.2f  cut %-5v summary %v\n",
				path, i+1, ms(turn.Wall), ms(turn.PromptEval), ms(turn.Load), turn.Evaluated, turn.Forwarded, turn.Limit, turn.Kept, turn.Cut, turn.Summary)
		}
		history = append(history, message{Role: "assistant", Content: reply})
		if cfg.Think > 0 {
			select {
			case <-time.After(cfg.Think):
			case <-ctx.Done():
			}
		}
	}
	res.SummarizerCalls = rec.summaries()
	return res, nil
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatReply struct {
	Message            message `json:"message"`
	PromptEvalCount    int     `json:"prompt_eval_count"`
	PromptEvalCached   *int    `json:"prompt_eval_cached_count"`
	PromptEvalDuration int64   `json:"prompt_eval_duration"`
	LoadDuration       int64   `json:"load_duration"`
	Error              string  `json:"error"`
}

// send posts one turn to /api/chat, not streamed, and returns the reply.
func send(ctx context.Context, base, session string, cfg Config, history []message, proxied bool) (string, Turn, error) {
	body := map[string]any{"model": cfg.Model, "messages": history, "stream": false}
	if !proxied {
		body["options"] = map[string]any{"num_ctx": cfg.Window}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return "", Turn{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/chat", bytes.NewReader(b))
	if err != nil {
		return "", Turn{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", session)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", Turn{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	wall := time.Since(start)
	if err != nil {
		return "", Turn{}, err
	}
	var r chatReply
	if err := json.Unmarshal(data, &r); err != nil || resp.StatusCode != http.StatusOK || r.Error != "" {
		return "", Turn{}, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, data)
	}
	t := Turn{
		Wall: wall, PromptEval: time.Duration(r.PromptEvalDuration), Load: time.Duration(r.LoadDuration),
		Evaluated: r.PromptEvalCount, Forwarded: r.PromptEvalCount, Limit: cfg.Window, Cached: -1,
	}
	if r.PromptEvalCached != nil {
		t.Cached = *r.PromptEvalCached
	}
	if proxied {
		t.Forwarded, _ = strconv.Atoi(resp.Header.Get("X-Ctxproxy-Tokens"))
		t.Limit, _ = strconv.Atoi(resp.Header.Get("X-Ctxproxy-Limit"))
	}
	return r.Message.Content, t, nil
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// words make the user messages: plain prose with numbers and names, as
// people write, deterministic for a seed.
var words = strings.Fields(`the a of to and in is it that for on with as was at by this be from
we you they have not are or but can will more about which when one all there their what so up out
if time into has only new some could them other than then now look also after use two how our work
first well way even because any these give day most us file server build test deploy config model
window token cache prompt reply session backend request error retry user budget summary message
Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Paris Berlin Tokyo Lagos Lima Oslo`)

// UserMessages returns turns user messages of about chars characters
// each (from half to one and a half times), the same for a seed.
func UserMessages(turns, chars int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]string, turns)
	for i := range out {
		want := chars/2 + rng.IntN(chars+1)
		var b strings.Builder
		fmt.Fprintf(&b, "Turn %d. ", i+1)
		for b.Len() < want {
			if rng.IntN(9) == 0 {
				fmt.Fprintf(&b, "%d ", rng.IntN(10000))
				continue
			}
			b.WriteString(words[rng.IntN(len(words))])
			if rng.IntN(12) == 0 {
				b.WriteString(". ")
			} else {
				b.WriteByte(' ')
			}
		}
		out[i] = strings.TrimSpace(b.String()) + "?"
	}
	return out
}

// recorder forwards everything to Ollama and remembers the chat prompts
// it forwarded.
type recorder struct {
	srv *http.Server
	url string

	mu sync.Mutex
	// last is the chat prompt forwarded last, its messages' roles and
	// contents joined by NUL bytes; seen says there is one not taken.
	last  string
	seen  bool
	calls int
}

// summarizerPrompt begins the built-in summarizer's system prompt.
const summarizerPrompt = "You condense one exchange"

func startRecorder(ollama string) (*recorder, error) {
	target, err := url.Parse(ollama)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &recorder{url: "http://" + ln.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		req.Host = target.Host // Ollama refuses names it does not know
		if req.Method != http.MethodPost || req.URL.Path != "/api/chat" {
			rp.ServeHTTP(w, req)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		var chat struct {
			Messages []message `json:"messages"`
		}
		_ = json.Unmarshal(body, &chat)
		if len(chat.Messages) > 0 && strings.HasPrefix(chat.Messages[0].Content, summarizerPrompt) {
			r.mu.Lock()
			r.calls++
			r.mu.Unlock()
			rp.ServeHTTP(w, req)
			return
		}
		var b strings.Builder
		for i, m := range chat.Messages {
			if i > 0 {
				b.WriteByte(0)
			}
			b.WriteString(m.Role)
			b.WriteByte(0)
			b.WriteString(m.Content)
		}
		// Recorded before forwarding: the client may have the reply
		// before ServeHTTP returns.
		r.mu.Lock()
		r.last, r.seen = b.String(), true
		r.mu.Unlock()
		rp.ServeHTTP(w, req)
	})}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// take returns the chat prompt forwarded since the last take.
func (r *recorder) take() (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := r.seen
	r.seen = false
	return r.last, seen
}

func (r *recorder) summaries() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

func (r *recorder) close() { _ = r.srv.Close() }

// proxy is a running ctxproxy.
type proxy struct {
	url string
	cmd *exec.Cmd
}

// yamlFor is the configuration of path.
func yamlFor(cfg Config, path string) string {
	strategy := "strategy: {mode: " + path + "}"
	if cfg.Strategy != "" {
		strategy = "strategy: {mode: " + path + ", " + cfg.Strategy + "}"
	}
	if path == PerTurn {
		strategy = "strategy: {mode: token_budget, threshold: 0.8, target: 0.8}"
	}
	return fmt.Sprintf("backend: {kind: ollama}\nmodels: {%s: {max_tokens: %d}}\n%s\n%s\n",
		cfg.Model, cfg.Window, strategy, cfg.YAML)
}

func startProxy(ctx context.Context, cfg Config, path, backend string) (*proxy, error) {
	dir := filepath.Join(cfg.Dir, path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "ctxproxy.yaml")
	if err := os.WriteFile(conf, []byte(yamlFor(cfg, path)), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "ctxproxy.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(cfg.Bin, "serve", "--config", conf, "--listen", addr, "--backend", backend,
		"--log-format", "json", "--log-level", "debug")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CTXPROXY_SNAPSHOTS_DIR="+filepath.Join(dir, "data"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proxy{url: "http://" + addr, cmd: cmd}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
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
	return nil, errors.New("ctxproxy did not become ready; see " + filepath.Join(dir, "ctxproxy.log"))
}

func logOf(cfg Config, path string) string {
	if path == Alone {
		return "Ollama alone"
	}
	return "see " + filepath.Join(cfg.Dir, path, "ctxproxy.log")
}

func (p *proxy) stop() {
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
