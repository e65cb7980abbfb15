package backend

import (
	"context"
	"encoding/json"
	"errors"
	"hash/maphash"
	"net/http"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/cache"
)

// Tokenize APIs of OpenAI-compatible backends that ctxproxy counts with.
const (
	// RemoteVLLM is vLLM's POST /tokenize, which takes a chat request's
	// messages and tools and applies the model's chat template itself
	// (vllm/entrypoints/openai/protocol.py: TokenizeChatRequest,
	// TokenizeResponse {count, max_model_len, tokens}).
	RemoteVLLM = "vllm"
	// RemoteLlamaCpp is llama.cpp's server: POST /apply-template renders
	// the messages, POST /tokenize {content, add_special} tokenizes the
	// result (tools/server/README.md).
	RemoteLlamaCpp = "llama.cpp"
)

// Remote is what an OpenAI-compatible backend offers for counting one
// model's prompts.
type Remote struct {
	// API is RemoteVLLM, RemoteLlamaCpp, or "" when the backend has no
	// tokenize endpoint.
	API string
	// Window is the model's context window when the backend says it
	// (vLLM's max_model_len), else 0.
	Window int
}

// remoteState caches, per model, which API the backend has, and counts of
// whole prompts by a hash of their messages and tools: a resent
// conversation costs no round trip, a new message one. Both caches are
// keyed by client data and keep the most recently used entries.
type remoteState struct {
	models *cache.LRU[string, remoteEntry]
	seed   maphash.Seed
	counts *cache.LRU[uint64, int]

	// probing holds the probe in flight per model, so that one runs at a
	// time; an entry lives only as long as its probe.
	mu      sync.Mutex
	probing map[string]chan struct{}
}

func newRemoteState() remoteState {
	return remoteState{
		models:  cache.New[string, remoteEntry](maxModels),
		seed:    maphash.MakeSeed(),
		counts:  cache.New[uint64, int](maxRemoteCount),
		probing: make(map[string]chan struct{}),
	}
}

type remoteEntry struct {
	remote Remote
	until  time.Time
}

const (
	remoteTTL      = 10 * time.Minute
	remoteErrorTTL = 30 * time.Second
	maxRemoteCount = 1 << 14
)

// Remote returns the tokenize API the backend offers for model, asking
// it once (POST /tokenize) and again after a while. Only OpenAI-kind
// backends are asked: Ollama has none, and is counted by its model's
// own tokenizer instead.
func (b *Backend) Remote(ctx context.Context, model string) Remote {
	if b.Kind(ctx) != KindOpenAI {
		return Remote{}
	}
	rs := &b.remote
	rs.mu.Lock()
	if e, ok := rs.models.Get(model); ok && b.now().Before(e.until) {
		rs.mu.Unlock()
		return e.remote
	}
	if wait, ok := rs.probing[model]; ok {
		rs.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return Remote{}
		}
		e, _ := rs.models.Peek(model)
		return e.remote
	}
	done := make(chan struct{})
	rs.probing[model] = done
	rs.mu.Unlock()

	r, definite := b.probeRemote(ctx, model)
	ttl := remoteTTL
	if !definite {
		ttl = remoteErrorTTL
	}
	rs.mu.Lock()
	rs.models.Add(model, remoteEntry{remote: r, until: b.now().Add(ttl)})
	delete(rs.probing, model)
	close(done)
	rs.mu.Unlock()
	if r.API != "" {
		b.log.Info("the backend tokenizes: exact token counts from it", "model", model, "api", r.API, "window", r.Window)
	}
	return r
}

// probeRemote asks POST /tokenize with both vLLM's and llama.cpp's
// fields: vLLM answers with count and max_model_len, llama.cpp with
// tokens alone; a 404 means neither.
func (b *Backend) probeRemote(ctx context.Context, model string) (Remote, bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var out struct {
		Count       *int  `json:"count"`
		MaxModelLen int   `json:"max_model_len"`
		Tokens      []int `json:"tokens"`
	}
	status, err := b.JSON(ctx, http.MethodPost, "/tokenize", map[string]any{"model": model, "prompt": "hi", "content": "hi"}, &out, 1<<20)
	switch {
	case status == 0 || status >= 500 || status == http.StatusTooManyRequests:
		return Remote{}, false
	case err != nil:
		return Remote{}, true
	case out.Count != nil:
		return Remote{API: RemoteVLLM, Window: out.MaxModelLen}, true
	case out.Tokens != nil:
		return Remote{API: RemoteLlamaCpp}, true
	}
	return Remote{}, true
}

// ErrNoRemote means the backend has no tokenize API for the model.
var ErrNoRemote = errors.New("backend: no tokenize API")

// CountRemote returns the prompt tokens of a chat request's messages and
// tools (raw JSON, OpenAI shape) as the backend itself counts them: one
// round trip for vLLM, two for llama.cpp, none for a prompt counted
// before.
func (b *Backend) CountRemote(ctx context.Context, model string, messages, tools json.RawMessage) (int, error) {
	r := b.Remote(ctx, model)
	if r.API == "" {
		return 0, ErrNoRemote
	}
	rs := &b.remote
	var h maphash.Hash
	h.SetSeed(rs.seed)
	h.WriteString(model)
	h.WriteByte(0)
	h.Write(messages)
	h.WriteByte(0)
	h.Write(tools)
	key := h.Sum64()
	n, ok := rs.counts.Get(key)
	if ok {
		return n, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch r.API {
	case RemoteVLLM:
		req := map[string]any{"model": model, "messages": messages, "add_generation_prompt": true}
		if len(tools) > 0 {
			req["tools"] = tools
		}
		var out struct {
			Count int `json:"count"`
		}
		if _, err := b.JSON(ctx, http.MethodPost, "/tokenize", req, &out, 64<<20); err != nil {
			return 0, err
		}
		n = out.Count
	case RemoteLlamaCpp:
		var tmpl struct {
			Prompt string `json:"prompt"`
		}
		req := map[string]any{"messages": messages}
		if len(tools) > 0 {
			req["tools"] = tools
		}
		if _, err := b.JSON(ctx, http.MethodPost, "/apply-template", req, &tmpl, 64<<20); err != nil {
			return 0, err
		}
		var out struct {
			Tokens []json.RawMessage `json:"tokens"`
		}
		if _, err := b.JSON(ctx, http.MethodPost, "/tokenize",
			map[string]any{"content": tmpl.Prompt, "add_special": true, "parse_special": true}, &out, 64<<20); err != nil {
			return 0, err
		}
		n = len(out.Tokens)
	}
	rs.counts.Add(key, n)
	return n, nil
}
