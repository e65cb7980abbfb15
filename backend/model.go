package backend

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/internal/cache"
	"github.com/ctxproxy/ctxproxy/modelinfo"
	"github.com/ollama/ollama/api"
)

// Details is what ctxproxy knows of one Ollama model.
type Details struct {
	Name string
	// Facts size the KV cache; Facts.ContextLength is the trained window.
	Facts modelinfo.Facts
	// Weights is the model's size in bytes (/api/tags), 0 if unknown.
	Weights uint64
	// Digest identifies the model's files (/api/tags); the tokenizer is
	// loaded again only when it changes.
	Digest string
	// Err is why the facts could not be read (nil when they were).
	Err error
	// Tokenizer counts the model's prompts exactly; nil when the model's
	// vocabulary could not be read or used (TokenizerErr says why). The
	// request shapes whose counts disagreed with the backend's are not
	// counted with it (Missed).
	Tokenizer *exact.Tokenizer
	// TokenizerErr is why there is no Tokenizer.
	TokenizerErr error
	// Capabilities are what /api/show lists ("completion", "tools",
	// "thinking", "vision", …); nil when it could not be read.
	Capabilities []string
	// NumCtx is the model's own num_ctx, a PARAMETER of its Modelfile
	// (the window Ollama runs it with when a request sets none); 0 when
	// it sets none.
	NumCtx int

	fetched time.Time
	drift   *drift
	// tokKey finds the tokenizer in the cache: the digest and the
	// server's version, whose rules it counts with.
	tokKey string
	// built: this fetch read a verbose /api/show and built a tokenizer.
	built bool
}

// drift is the agreement of a model's exact counts with the backend's own,
// shared by every Model value of one digest.
type drift struct {
	worst   atomic.Uint64 // math.Float64bits of the largest relative error seen
	checked atomic.Int64
	mu      sync.Mutex
	// misses holds the first miss of each request shape whose counts
	// disagreed: that shape is counted by estimate since, the others
	// stay exact.
	misses map[string]Miss
}

// Miss is an exact count that disagreed with the backend's report.
type Miss struct {
	// Shape is what the request had that others may not: "tools",
	// "think", "images", joined by "+", or "plain" (see the proxy).
	Shape              string
	Estimate, Reported int
	// Tokenizer names how the model was counted: engine, tokenizer kind
	// and pre-tokenizer, and the renderer when one built the prompt
	// ("ollama:gpt2/qwen2, renderer qwen3-coder").
	Tokenizer string
}

// Error is the miss relative to the backend's count (0.01 = 1%).
func (m Miss) Error() float64 { return float64(m.Estimate-m.Reported) / float64(m.Reported) }

// String says the miss for a warning: "exact counts of requests with
// tools disagreed with the backend's (ctxproxy 1536, Ollama 2677,
// -42.6%; counted with ollama:gpt2/qwen2)".
func (m Miss) String() string {
	return fmt.Sprintf("exact counts of %s requests disagreed with the backend's (ctxproxy %d, backend %d, %+.1f%%; counted with %s)",
		m.Shape, m.Estimate, m.Reported, 100*m.Error(), m.Tokenizer)
}

// Agreement is how a model's exact counts compared with the backend's.
type Agreement struct {
	// Checked is the number of uncensored reports compared.
	Checked int64
	// WorstError is the largest relative error seen (0.01 = 1%).
	WorstError float64
	// Off reports that the counts of some request shapes disagreed
	// beyond Tolerance: those (Misses) are counted by calibration instead.
	Off    bool
	Misses []Miss
}

// Tolerance is how far an exact count may differ from the backend's
// report (relative, with at least two tokens of slack for tiny prompts)
// before the tokenizer is taken to be wrong for requests of that shape:
// another Ollama version, a renderer or engine that differs.
const Tolerance = 0.01

// Agrees reports whether an exact count agrees with the backend's report:
// within Tolerance, or two tokens for tiny prompts.
func Agrees(estimate, reported int) bool {
	return abs(estimate-reported) <= 2 || math.Abs(float64(estimate-reported)) <= Tolerance*float64(reported)
}

// Observe compares an exact count of what was forwarded, a request of the
// given shape, with the prompt tokens the backend reported. Reports that
// are censored (the backend capped them at its window) must not be
// passed. On the first disagreement of a shape beyond Tolerance it logs
// it, naming the shape, the tokenizer and the miss, and turns exact
// counting off for requests of that shape to the model's digest (Missed);
// it returns true then. One odd request shape never turns the model's
// other requests off exact counting.
func (m Details) Observe(log interface{ Warn(string, ...any) }, shape string, estimate, reported int) (turnedOff bool) {
	d := m.drift
	if d == nil || reported <= 0 {
		return false
	}
	d.checked.Add(1)
	e := math.Abs(float64(estimate-reported)) / float64(reported)
	for {
		old := d.worst.Load()
		if e <= math.Float64frombits(old) || d.worst.CompareAndSwap(old, math.Float64bits(e)) {
			break
		}
	}
	if Agrees(estimate, reported) {
		return false
	}
	miss := Miss{Shape: shape, Estimate: estimate, Reported: reported}
	if m.Tokenizer != nil {
		miss.Tokenizer = m.Tokenizer.Name()
		if r := m.Tokenizer.Renderer(); r != "" {
			miss.Tokenizer += ", renderer " + r
		}
	}
	d.mu.Lock()
	if _, ok := d.misses[shape]; ok {
		d.mu.Unlock()
		return false
	}
	if d.misses == nil {
		d.misses = map[string]Miss{}
	}
	d.misses[shape] = miss
	d.mu.Unlock()
	log.Warn("exact token counts disagree with the backend's; counting this model's requests of this shape by calibration from now on",
		"model", m.Name, "shape", shape, "tokenizer", miss.Tokenizer, "estimate", estimate, "reported", reported,
		"error", fmt.Sprintf("%+.1f%%", 100*miss.Error()))
	return true
}

// Lacks reports that the backend listed the model's capabilities and
// capability ("thinking", "tools", "vision") is not among them; false
// when they are unknown.
func (m Details) Lacks(capability string) bool {
	return m.Capabilities != nil && !slices.Contains(m.Capabilities, capability)
}

// Missed returns the miss that turned exact counting off for requests of
// shape to this model, if one did.
func (m Details) Missed(shape string) (Miss, bool) {
	if m.drift == nil {
		return Miss{}, false
	}
	m.drift.mu.Lock()
	defer m.drift.mu.Unlock()
	miss, ok := m.drift.misses[shape]
	return miss, ok
}

// Agreement returns how the model's exact counts compared so far.
func (m Details) Agreement() Agreement {
	if m.drift == nil {
		return Agreement{}
	}
	a := Agreement{Checked: m.drift.checked.Load(), WorstError: math.Float64frombits(m.drift.worst.Load())}
	m.drift.mu.Lock()
	for _, shape := range slices.Sorted(maps.Keys(m.drift.misses)) {
		a.Misses = append(a.Misses, m.drift.misses[shape])
	}
	m.drift.mu.Unlock()
	a.Off = len(a.Misses) > 0
	return a
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// Prepare fetches, in the background and one after another, what
// counting the models named needs (their facts and their tokenizer),
// for the names it has not been given before, up to
// Preparation.MaxModels: the Poller gives it the server's models, and
// the proxy the model of each request, so that a first request finds
// its tokenizer built or being built (and waits for that build rather
// than start another). It does nothing with Preparation.Mode none or a
// server that is not Ollama (prepare.go).
func (b *Backend) Prepare(names []string) {
	if kind, _ := b.Detected(); b.prep.mode != PrepareNone && kind != KindOpenAI {
		b.prep.add(names)
	}
}

// UseTokenizer makes tok count the models of m's digest from now on: the
// proxy found that it matches the backend where m's tokenizer did not
// (the other runner's, exact.Tokenizer.OtherEngine). The shapes that
// missed are forgotten with the old tokenizer, and the names cached with
// it are looked up again (by digest: no /api/show).
func (b *Backend) UseTokenizer(m Details, tok *exact.Tokenizer) {
	c := &b.models
	te, ok := c.tokenizers.Get(m.tokKey)
	if !ok || m.Digest == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	swapped := *te
	swapped.tok, swapped.err, swapped.drift = tok, nil, &drift{}
	c.tokenizers.Add(m.tokKey, &swapped)
	for name, e := range c.entries.All() {
		select {
		case <-e.ready:
			if e.model.Digest == m.Digest {
				c.entries.Remove(name)
			}
		default:
		}
	}
}

// modelCache holds Model per name; one fetch per name runs at a time.
// Names are client data: both caches keep the maxModels most recently
// used.
type modelCache struct {
	mu      sync.Mutex // makes finding and starting a fetch one step
	entries *cache.LRU[string, *modelEntry]
	// tokenizers by digest, so a refetch of an unchanged model (or two
	// names of one model) does not parse its vocabulary again.
	tokenizers *cache.LRU[string, *tokEntry]
	// building holds the tokenizer keys (digest and version) a fetch is
	// building now: another name of the same model waits for that build
	// rather than start a second (guarded by mu).
	building map[string]chan struct{}
}

// claim makes the caller the builder of key's tokenizer and returns nil,
// or returns the channel closed when the fetch building it now is done.
func (c *modelCache) claim(key string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if done, ok := c.building[key]; ok {
		return done
	}
	if c.building == nil {
		c.building = map[string]chan struct{}{}
	}
	c.building[key] = make(chan struct{})
	return nil
}

// release ends the build of key that claim gave the caller.
func (c *modelCache) release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.building[key])
	delete(c.building, key)
}

func newModelCache() modelCache {
	return modelCache{entries: cache.New[string, *modelEntry](maxModels), tokenizers: cache.New[string, *tokEntry](maxModels)}
}

type modelEntry struct {
	ready chan struct{}
	model Details
}

type tokEntry struct {
	tok   *exact.Tokenizer
	err   error
	drift *drift
	caps  []string
	// numCtx is the digest's Modelfile num_ctx (Details.NumCtx).
	numCtx int
	// facts are the digest's facts as its verbose /api/show gave them
	// (factsErr: incomplete, to be asked again).
	facts    modelinfo.Facts
	factsErr error
}

// How long model information is trusted: a model can be re-pulled with
// other weights under the same name. After an error it is asked again
// sooner.
const (
	modelTTL      = 10 * time.Minute
	modelErrorTTL = 15 * time.Second
	maxModels     = 256
	// showLimit bounds a verbose /api/show answer: a real model's
	// vocabulary and merges make tens of MB of JSON.
	showLimit = 512 << 20
)

// Model returns what the backend says of the model name, fetching it once
// (and again after modelTTL, or modelErrorTTL after an error).
func (b *Backend) Model(ctx context.Context, name string) Details {
	c := &b.models
	c.mu.Lock()
	e, ok := c.entries.Get(name)
	if ok {
		select {
		case <-e.ready:
			ttl := modelTTL
			if e.model.Err != nil {
				ttl = modelErrorTTL
			}
			if b.now().Sub(e.model.fetched) > ttl {
				ok = false
			}
		default:
		}
	}
	if !ok {
		e = &modelEntry{ready: make(chan struct{})}
		c.entries.Add(name, e)
		c.mu.Unlock()
		e.model = b.fetch(ctx, name)
		close(e.ready)
		if e.model.built {
			// The answer it was built from is garbage now (fetch has
			// returned): give its memory back.
			returnMemory()
		}
		return e.model
	}
	c.mu.Unlock()
	select {
	case <-e.ready:
		return e.model
	case <-ctx.Done():
		return Details{Name: name, Err: ctx.Err()}
	}
}

func (b *Backend) fetch(ctx context.Context, name string) Details {
	// A long vocabulary takes a while to send; the fetch serves every
	// request of the model, so a client that leaves does not cancel it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	m := Details{Name: name, fetched: b.now()}

	if tags, err := tags(ctx, b); err == nil {
		for _, t := range tags {
			if t.Name == name || t.Model == name || t.Name == name+":latest" {
				m.Weights, m.Digest = t.Size, t.Digest
			}
		}
	}

	// What a digest already read has (its tokenizer and facts) is reused
	// under any name: a model's files decide both. Another name of it (a
	// client's "qwen3" for /api/ps's "qwen3:latest") needs no /api/show,
	// which Ollama answers by reading the model's file again.
	// The server's version decides how it counts: a tokenizer is kept per
	// digest and version, and an upgraded server's models are built anew.
	version := b.Version(ctx)
	m.tokKey = m.Digest + "@" + version
	if m.Digest != "" {
		// Two names of one model asked at once (a client's "qwen3" and
		// Prepare's "qwen3:latest"): one reads and builds, the other waits.
		for {
			done := b.models.claim(m.tokKey)
			if done == nil {
				defer b.models.release(m.tokKey)
				break
			}
			select {
			case <-done:
			case <-ctx.Done():
				m.Err = ctx.Err()
				return m
			}
		}
	}
	te, _ := b.models.tokenizers.Get(m.tokKey)
	if te != nil && m.Digest != "" && te.factsErr == nil {
		m.Facts, m.Capabilities, m.NumCtx = te.facts, te.caps, te.numCtx
		m.Tokenizer, m.TokenizerErr, m.drift = te.tok, te.err, te.drift
		return m
	}
	verbose := te == nil || m.Digest == ""

	var show struct {
		exact.Show
	}
	// A digest read before this process started: from the disk cache.
	fromDisk := false
	if verbose && m.Digest != "" {
		show.Show, fromDisk = b.disk.load(m.Digest)
	}
	req := map[string]any{"model": name}
	if verbose {
		req["verbose"] = true
	}
	if !fromDisk {
		if _, err := b.JSON(ctx, http.MethodPost, "/api/show", req, &show, showLimit); err != nil {
			m.Err = err
			b.log.Warn("could not read the model's facts from the backend; will ask again", "model", name, "err", err)
			return m
		}
	}
	m.Facts, m.Err = modelinfo.Parse(show.ModelInfo)
	m.Capabilities = show.Capabilities
	m.NumCtx = modelfileNumCtx(show.Modelfile)
	if m.Err != nil {
		b.log.Warn("model facts incomplete", "model", name, "err", m.Err)
	}
	if verbose {
		m.built = true
		start := b.now()
		te = &tokEntry{drift: &drift{}, facts: m.Facts, factsErr: m.Err, caps: m.Capabilities, numCtx: m.NumCtx}
		show.Name, show.Version = name, version
		te.tok, te.err = exact.New(show.Show)
		if exact.NewerThanChecked(version) {
			b.newer.Do(func() {
				b.log.Warn("the backend is a newer Ollama than any ctxproxy has checked its counts against; counting as the newest it knows",
					"version", version, "newest_checked", exact.NewestChecked)
			})
		}
		if te.err != nil {
			b.log.Warn("no exact token counts for this model; estimating and calibrating instead", "model", name, "err", te.err)
		} else {
			b.log.Info("exact token counts from the model's own tokenizer", "model", name, "tokenizer", te.tok.Name(),
				"took", b.now().Sub(start).Round(time.Millisecond), "cached", fromDisk)
		}
		if m.Digest != "" {
			b.models.tokenizers.Add(m.tokKey, te)
			if !fromDisk && te.err == nil && m.Err == nil {
				b.disk.store(m.Digest, show.Show)
			}
		}
	}
	m.Tokenizer, m.TokenizerErr, m.drift = te.tok, te.err, te.drift
	return m
}

// freeing coalesces returnMemory's work: again is set by each call,
// running while a goroutine returns memory.
var freeing struct{ running, again atomic.Bool }

// returnMemory gives the system back, in the background, the memory a
// tokenizer's build leaves behind: the decoded verbose /api/show (megabytes
// of strings) and the build's scratch, which the runtime would keep for
// minutes. Measured on five tokenizers of 128,000–201,088 tokens built one
// after another: 124 MiB of RSS without it, 61 MiB with it
// (docs/benchmarks.md). Builds that end while it runs are covered by one
// more pass.
func returnMemory() {
	freeing.again.Store(true)
	if !freeing.running.CompareAndSwap(false, true) {
		return
	}
	go func() {
		for freeing.again.Swap(false) {
			debug.FreeOSMemory()
		}
		freeing.running.Store(false)
		if freeing.again.Load() {
			returnMemory()
		}
	}()
}

// modelfileNumCtx returns the num_ctx a Modelfile's text sets (the last
// "PARAMETER num_ctx N" line, as Ollama keeps the last), 0 when none does.
func modelfileNumCtx(modelfile string) int {
	n := 0
	for line := range strings.Lines(modelfile) {
		f := strings.Fields(line)
		if len(f) == 3 && strings.EqualFold(f[0], "PARAMETER") && strings.EqualFold(f[1], "num_ctx") {
			if v, err := strconv.Atoi(f[2]); err == nil && v > 0 {
				n = v
			}
		}
	}
	return n
}

// Render returns the prompt the server builds for p on model, rendered by
// the server itself (Ollama's _debug_render_only: the template or
// renderer run, nothing generated): for a renderer ctxproxy cannot render
// as this server does (exact.Tokenizer.ServerRenders). numCtx is the
// num_ctx the request will run with, so that rendering does not make the
// server load the model again at another size.
func (b *Backend) Render(ctx context.Context, model string, numCtx int, p exact.Prompt) (string, error) {
	req := api.ChatRequest{Model: model, Messages: p.Messages, Tools: p.Tools, Think: p.Think, DebugRenderOnly: true}
	stream := false
	req.Stream = &stream
	if numCtx > 0 {
		req.Options = map[string]any{"num_ctx": numCtx}
	}
	var out struct {
		DebugInfo *struct {
			RenderedTemplate string `json:"rendered_template"`
		} `json:"_debug_info"`
	}
	if _, err := b.JSON(ctx, http.MethodPost, "/api/chat", req, &out, showLimit); err != nil {
		return "", err
	}
	if out.DebugInfo == nil {
		return "", fmt.Errorf("the backend did not render the prompt (no _debug_info in its answer)")
	}
	return out.DebugInfo.RenderedTemplate, nil
}
