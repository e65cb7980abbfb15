package fleetbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/replay"
)

// Plan is a replay of concurrent chat sessions.
type Plan struct {
	// URLs are the ctxproxy replicas; turn t of session s goes to
	// URLs[(s+t) % len(URLs)], so that with several a session's turns
	// go round robin over them.
	URLs []string
	// Model is the model chatted with.
	Model string
	// Sessions are replayed, Concurrency at a time, Turns each.
	Sessions, Concurrency, Turns int
	// UserChars is the mean length of a user message; Seed makes the
	// messages (session s uses Seed+s).
	UserChars int
	Seed      uint64
	// ID prefixes the sessions' X-Session-ID (one run's sessions must not
	// be another's).
	ID string
	// Pause, when above 0, holds every session after its turn Pause
	// until all have finished it, then calls AtPause with the turns so
	// far before any goes on. It needs Sessions <= Concurrency.
	Pause   int
	AtPause func(done []Turn)
	// Stagger is the pause between the starts of two sessions: users
	// do not all begin in the same millisecond.
	Stagger time.Duration
	// Timeout bounds one turn (default five minutes).
	Timeout time.Duration
}

// Turn is one answered (or lost) turn.
type Turn struct {
	// Session and Turn count from 1.
	Session, Turn int
	// Status is the HTTP status, 0 when none came; Err says what went
	// wrong (a status other than 200, an error in the stream).
	Status int
	Err    string
	// Backend is the server the answer's X-Ctxproxy-Backend names;
	// MovedFrom the server it names as moved-from (the session's
	// previous server, which could not take the turn), if any.
	Backend, MovedFrom string
	// TTFB is the time to the answer's first byte; Wall to its end.
	TTFB, Wall time.Duration
	// PromptEval is Ollama's prompt_eval_duration, PromptCount its
	// prompt_eval_count, Cached its prompt_eval_cached_count (-1 when
	// the server does not report it).
	PromptEval  time.Duration
	PromptCount int
	Cached      int
}

// OK reports whether the turn was answered 200 without an error.
func (t Turn) OK() bool { return t.Status == http.StatusOK && t.Err == "" }

// Run replays p and returns every turn, sessions in order; ctx ends it
// early with the turns so far.
func Run(ctx context.Context, p Plan) ([]Turn, error) {
	if len(p.URLs) == 0 || p.Sessions <= 0 || p.Turns <= 0 {
		return nil, errors.New("fleetbench: a plan needs URLs, sessions and turns")
	}
	if p.Concurrency <= 0 {
		p.Concurrency = p.Sessions
	}
	if p.Pause > 0 && p.Sessions > p.Concurrency {
		return nil, errors.New("fleetbench: a pause needs every session running at once")
	}
	if p.Timeout <= 0 {
		p.Timeout = 5 * time.Minute
	}
	results := make([][]Turn, p.Sessions)
	var mu sync.Mutex
	var pause *barrier
	if p.Pause > 0 {
		pause = newBarrier(p.Sessions, func() {
			if p.AtPause == nil {
				return
			}
			mu.Lock()
			var done []Turn
			for _, r := range results {
				done = append(done, r...)
			}
			mu.Unlock()
			p.AtPause(done)
		})
	}
	slots := make(chan struct{}, p.Concurrency)
	var wg sync.WaitGroup
	for s := range p.Sessions {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if s > 0 && p.Stagger > 0 {
			select {
			case <-time.After(p.Stagger):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			users := replay.UserMessages(p.Turns, p.UserChars, p.Seed+uint64(s))
			session := fmt.Sprintf("%s-%02d", p.ID, s+1)
			history := []message{{Role: "system", Content: "You are a helpful assistant. Answer briefly."}}
			for t, u := range users {
				if ctx.Err() != nil {
					break
				}
				history = append(history, message{Role: "user", Content: u})
				url := p.URLs[(s+t)%len(p.URLs)]
				turn, reply := send(ctx, url, session, p.Model, history, p.Timeout)
				turn.Session, turn.Turn = s+1, t+1
				if turn.OK() {
					history = append(history, message{Role: "assistant", Content: reply})
				} else {
					// The user sends the next message instead.
					history = history[:len(history)-1]
				}
				mu.Lock()
				results[s] = append(results[s], turn)
				mu.Unlock()
				if pause != nil && t+1 == p.Pause {
					pause.wait()
				}
			}
		})
	}
	wg.Wait()
	var out []Turn
	for _, r := range results {
		out = append(out, r...)
	}
	return out, ctx.Err()
}

// barrier holds n goroutines until all have arrived, and runs f once
// before releasing them.
type barrier struct {
	mu      sync.Mutex
	n, seen int
	release chan struct{}
	f       func()
}

func newBarrier(n int, f func()) *barrier {
	return &barrier{n: n, release: make(chan struct{}), f: f}
}

func (b *barrier) wait() {
	b.mu.Lock()
	b.seen++
	last := b.seen == b.n
	b.mu.Unlock()
	if last {
		b.f()
		close(b.release)
	}
	<-b.release
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chunk is one line of /api/chat's stream.
type chunk struct {
	Message            message `json:"message"`
	Done               bool    `json:"done"`
	PromptEvalCount    int     `json:"prompt_eval_count"`
	PromptEvalCached   *int    `json:"prompt_eval_cached_count"`
	PromptEvalDuration int64   `json:"prompt_eval_duration"`
	Error              string  `json:"error"`
}

// send posts one streamed turn to base's /api/chat and returns it and
// the reply.
func send(ctx context.Context, base, session, model string, history []message, timeout time.Duration) (Turn, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	turn := Turn{Cached: -1}
	b, _ := json.Marshal(map[string]any{"model": model, "messages": history, "stream": true})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/chat", bytes.NewReader(b))
	if err != nil {
		turn.Err = err.Error()
		return turn, ""
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", session)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		turn.Err, turn.Wall = err.Error(), time.Since(start)
		return turn, ""
	}
	defer resp.Body.Close()
	turn.Status = resp.StatusCode
	turn.Backend, turn.MovedFrom = parseBackend(resp.Header.Get("X-Ctxproxy-Backend"))
	r := bufio.NewReader(resp.Body)
	if _, err := r.Peek(1); err == nil {
		turn.TTFB = time.Since(start)
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(r)
		turn.Err, turn.Wall = fmt.Sprintf("HTTP %d: %.200s", resp.StatusCode, bytes.TrimSpace(data)), time.Since(start)
		return turn, ""
	}
	var reply strings.Builder
	done := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var c chunk
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			turn.Err = fmt.Sprintf("a line that is not JSON: %.200s", sc.Text())
			break
		}
		if c.Error != "" {
			turn.Err = "error in the stream: " + c.Error
			break
		}
		reply.WriteString(c.Message.Content)
		if c.Done {
			done = true
			turn.PromptEval, turn.PromptCount = time.Duration(c.PromptEvalDuration), c.PromptEvalCount
			if c.PromptEvalCached != nil {
				turn.Cached = *c.PromptEvalCached
			}
		}
	}
	turn.Wall = time.Since(start)
	switch {
	case turn.Err != "":
	case sc.Err() != nil:
		turn.Err = "reading the stream: " + sc.Err().Error()
	case !done:
		turn.Err = "the stream ended without done"
	}
	return turn, reply.String()
}

// parseBackend reads X-Ctxproxy-Backend: "b", or "b; moved-from=a".
func parseBackend(v string) (server, movedFrom string) {
	server, params, _ := strings.Cut(v, ";")
	for p := range strings.SplitSeq(params, ";") {
		if k, val, ok := strings.Cut(strings.TrimSpace(p), "="); ok && k == "moved-from" {
			movedFrom = val
		}
	}
	return strings.TrimSpace(server), movedFrom
}
