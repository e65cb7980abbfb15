// Package backend is ctxproxy's view of the server behind it: which kind
// it is (Ollama or OpenAI-compatible), what each model is (trained
// context, the facts that size its KV cache, its weights and digest), and
// how to count its prompts exactly (the model's own tokenizer and chat
// template, loaded once per model digest).
//
// Tokenizers are prepared before a model's first request where they can
// be (prepare.go): a Poller per server prepares its models as they appear
// (those loaded, or all), and Prepare those a request names.
//
// A Backend is built first at start-up and handed to whatever needs it.
// It never pins a failure: a kind that could not be detected and model
// information that could not be read are asked for again, with backoff,
// so a backend that was down or busy at start is managed fully once it
// answers.
package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/modelinfo"
)

// Kinds of backend.
const (
	KindAuto    = "auto"
	KindOllama  = "ollama"
	KindOpenAI  = "openai"
	KindUnknown = "unknown"
)

// Config configures a Backend. URL and Client are required.
type Config struct {
	// URL is the backend's root.
	URL *url.URL
	// Kind is ollama, openai or auto (detect; the default).
	Kind string
	// Client makes ctxproxy's own calls to the backend; give it the
	// proxy's transport so the same pool and timeouts apply.
	Client *http.Client
	// Log may be nil.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// TokenizerDir keeps what builds each model digest's tokenizer
	// across restarts ("" keeps nothing).
	TokenizerDir string
	// Prepare is what is prepared before a model's first request.
	Prepare Preparation
}

// Backend is the server behind ctxproxy. It is safe for concurrent use.
type Backend struct {
	url    *url.URL
	client *http.Client
	log    *slog.Logger
	now    func() time.Time

	configured string
	kindMu     sync.Mutex
	kind       string    // detected; KindUnknown until then
	version    string    // /api/version's answer; "" until then
	kindNext   time.Time // when to ask again
	kindWait   time.Duration
	detecting  chan struct{} // closed when the probe in flight ends

	lastOK atomic.Int64 // unix ns of the backend's last answer

	models modelCache
	prep   *preparer
	remote remoteState
	disk   diskCache
	// newer says once that the server is newer than ctxproxy's rules.
	newer sync.Once
	// listing is what the Poller last read of the server's models.
	listing atomic.Pointer[Listing]
}

// New returns a Backend for cfg.
func New(cfg Config) *Backend {
	b := &Backend{url: cfg.URL, client: cfg.Client, log: cfg.Log, now: cfg.Now, configured: cfg.Kind, kind: KindUnknown}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	if b.now == nil {
		b.now = time.Now
	}
	b.disk = diskCache{dir: cfg.TokenizerDir, log: b.log}
	if b.configured == "" {
		b.configured = KindAuto
	}
	b.models = newModelCache()
	b.prep = newPreparer(b, cfg.Prepare)
	b.remote = newRemoteState()
	return b
}

// URL returns the backend's root URL.
func (b *Backend) URL() *url.URL { return b.url }

// Client returns the client ctxproxy's own calls use.
func (b *Backend) Client() *http.Client { return b.client }

// Backoff bounds for re-probing the kind after a failure.
const (
	kindRetryMin = time.Second
	kindRetryMax = time.Minute
	// kindRecheck is how long a detected "openai" answer is trusted: an
	// Ollama that answered 404 while starting, or one put in place of
	// another server, is found again.
	kindRecheck = 5 * time.Minute
)

// Kind returns ollama, openai, or unknown while the backend has not
// answered. With kind auto it asks GET /api/version; an answer that says
// nothing (a transport error, 5xx, 408, 429) is asked again with backoff
// from 1 s to 1 min instead of being taken for an answer. One probe runs
// at a time; callers do not wait for it beyond ctx.
func (b *Backend) Kind(ctx context.Context) string {
	switch b.configured {
	case KindOpenAI:
		return KindOpenAI
	case KindOllama:
		b.probe(ctx) // for the version
		return KindOllama
	}
	return b.probe(ctx)
}

// Version returns the server's version as its /api/version says it
// ("0.17.4"), asked whatever backend.kind says, and "" while it has not
// said (an OpenAI-compatible server never does). It is asked again after
// the backend could not be reached (Forget): it may have been upgraded.
func (b *Backend) Version(ctx context.Context) string {
	if b.configured == KindOpenAI {
		return ""
	}
	b.probe(ctx)
	b.kindMu.Lock()
	defer b.kindMu.Unlock()
	return b.version
}

// Detected returns the kind and version the backend has said so far,
// without asking it (for metrics and status, which must not probe).
func (b *Backend) Detected() (kind, version string) {
	b.kindMu.Lock()
	defer b.kindMu.Unlock()
	kind = b.kind
	if b.configured == KindOllama || b.configured == KindOpenAI {
		kind = b.configured
	}
	return kind, b.version
}

// probe returns the detected kind, asking /api/version when it is time.
func (b *Backend) probe(ctx context.Context) string {
	b.kindMu.Lock()
	k := b.kind
	if b.now().Before(b.kindNext) || b.detecting != nil {
		wait := b.detecting
		b.kindMu.Unlock()
		if wait != nil && k == KindUnknown {
			select { // the first requests wait for the probe in flight
			case <-wait:
			case <-ctx.Done():
			}
			b.kindMu.Lock()
			k = b.kind
			b.kindMu.Unlock()
		}
		return k
	}
	done := make(chan struct{})
	b.detecting = done
	b.kindMu.Unlock()

	got, version, definite := b.detect(ctx)

	b.kindMu.Lock()
	defer b.kindMu.Unlock()
	b.detecting = nil
	close(done)
	switch {
	case definite:
		if got != b.kind || version != b.version {
			b.log.Info("backend detected", "kind", got, "version", version, "url", b.url.Redacted())
		}
		b.kind, b.version, b.kindWait = got, version, 0
		if got == KindOllama {
			b.kindNext = b.now().Add(24 * time.Hour) // until Forget
		} else {
			b.kindNext = b.now().Add(kindRecheck)
		}
	default:
		b.kindWait = min(max(2*b.kindWait, kindRetryMin), kindRetryMax)
		b.kindNext = b.now().Add(b.kindWait)
		if b.kind == KindUnknown {
			b.log.Debug("backend kind not detected yet; asking again", "in", b.kindWait)
		}
	}
	return b.kind
}

// Forget makes the next request detect the kind again (after the backend
// could not be reached: it may have been replaced).
func (b *Backend) Forget() {
	if b.configured == KindOpenAI {
		return
	}
	b.kindMu.Lock()
	b.kind, b.kindNext, b.kindWait = KindUnknown, time.Time{}, 0
	b.kindMu.Unlock()
}

// detect asks /api/version. definite is false when the answer tells
// nothing about the kind; version is Ollama's answer.
func (b *Backend) detect(ctx context.Context) (kind, version string, definite bool) {
	// The answer is for every request: a client that goes away must not
	// cut it short for the others.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	var v struct {
		Version string `json:"version"`
	}
	status, err := b.JSON(ctx, http.MethodGet, "/api/version", nil, &v, 1<<20)
	switch {
	case status == http.StatusOK && err == nil && v.Version != "":
		return KindOllama, v.Version, true
	case status == http.StatusOK:
		return KindOpenAI, "", true // answers, but not as Ollama does
	case status == 0, status >= 500, status == http.StatusRequestTimeout, status == http.StatusTooManyRequests:
		return KindUnknown, "", false
	default: // 404, 401, 405…: a server without Ollama's API
		return KindOpenAI, "", true
	}
}

// LastOK returns when the backend last answered anything (zero if never).
func (b *Backend) LastOK() time.Time {
	n := b.lastOK.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Answered records that the backend answered (the proxy calls it for
// forwarded requests too).
func (b *Backend) Answered() { b.lastOK.Store(b.now().UnixNano()) }

// readyWindow is how recently the backend must have answered for Ready to
// hold without asking it again.
const readyWindow = 15 * time.Second

// Ready reports whether the backend answered within the last few seconds,
// asking it (Probe) when it has not.
func (b *Backend) Ready(ctx context.Context) bool {
	return b.now().Sub(b.LastOK()) < readyWindow || b.Probe(ctx)
}

// Probe reports whether the backend answers HTTP at all; any status
// counts, since an OpenAI-compatible server may 404 on "/".
func (b *Backend) Probe(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url.JoinPath("/").String(), nil)
	if err != nil {
		return false
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	b.Answered()
	return true
}

// ErrTooLarge means an answer was larger than the caller allowed.
var ErrTooLarge = errors.New("backend: answer too large")

// JSON calls the backend itself (not on behalf of a client) and decodes a
// JSON answer of at most limit bytes into out. It returns the status, 0
// when the backend could not be reached.
func (b *Backend) JSON(ctx context.Context, method, path string, in, out any, limit int64) (int, error) {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.url.JoinPath(path).String(), body)
	if err != nil {
		return 0, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b.Answered()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return resp.StatusCode, fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out == nil {
		return resp.StatusCode, nil
	}
	lr := &io.LimitedReader{R: resp.Body, N: limit + 1}
	if err := json.NewDecoder(lr).Decode(out); err != nil {
		if lr.N <= 0 {
			return resp.StatusCode, fmt.Errorf("%s %s: %w (over %d bytes)", method, path, ErrTooLarge, limit)
		}
		return resp.StatusCode, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp.StatusCode, nil
}

// LoadedModels is the gpu monitor's view of /api/ps: which models Ollama
// holds in memory and how much each takes, so their memory is not taken
// for memory someone else uses.
func (b *Backend) LoadedModels(ctx context.Context) ([]modelinfo.Loaded, error) {
	if b.Kind(ctx) != KindOllama {
		return nil, nil
	}
	var ps struct {
		Models []struct {
			Name          string `json:"name"`
			Size          uint64 `json:"size"`
			SizeVRAM      uint64 `json:"size_vram"`
			ContextLength int    `json:"context_length"`
		} `json:"models"`
	}
	if _, err := b.JSON(ctx, http.MethodGet, "/api/ps", nil, &ps, 16<<20); err != nil {
		return nil, err
	}
	out := make([]modelinfo.Loaded, 0, len(ps.Models))
	for _, m := range ps.Models {
		out = append(out, modelinfo.Loaded{Name: m.Name, Size: m.Size, SizeVRAM: m.SizeVRAM, NumCtx: m.ContextLength})
	}
	return out, nil
}

// ModelFacts returns what the backend says of model: the facts that size
// its KV cache and its weights in bytes (for `ctxproxy gpu`).
func (b *Backend) ModelFacts(ctx context.Context, model string) (modelinfo.Facts, uint64, error) {
	m := b.Model(ctx, model)
	return m.Facts, m.Weights, m.Err
}

// Listing returns what the server last said it has (Poller).
func (b *Backend) Listing() Listing {
	if l := b.listing.Load(); l != nil {
		return *l
	}
	return Listing{}
}
