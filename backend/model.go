package backend

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
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
	e, ok, _ := c.lookup(name, b.now())
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

// lookup returns name's entry, c.mu held: ok when there is one to use
// (being read, or read and still fresh), ready when it has been read.
func (c *modelCache) lookup(name string, now time.Time) (e *modelEntry, ok, ready bool) {
	e, ok = c.entries.Get(name)
	if !ok {
		return nil, false, false
	}
	select {
	case <-e.ready:
		return e, e.model.freshAt(now), true
	default:
		return e, true, false
	}
}

// freshAt reports whether m, read before, is still to be trusted at now:
// for modelTTL, or modelErrorTTL after an error.
func (m Details) freshAt(now time.Time) bool {
	ttl := modelTTL
	if m.Err != nil {
		ttl = modelErrorTTL
	}
	return now.Sub(m.fetched) <= ttl
}

// Pending is a model whose tokenizer is being built while a request to it
// goes on (ModelSoon): its Details as a plain /api/show gives them at once
// (facts, capabilities, num_ctx; no Tokenizer), and a Sketch of its
// prompts (exact.Sketch: a bound of their tokens; nil when there is none).
type Pending struct {
	Details
	Sketch *exact.Tokenizer
	ready  chan struct{}
	whole  Details
}

// Wait returns the model's whole Details, as Model returns them, once
// they are read.
func (p *Pending) Wait(ctx context.Context) Details {
	select {
	case <-p.ready:
		return p.whole
	case <-ctx.Done():
		return Details{Name: p.Name, Err: ctx.Err()}
	}
}

// ModelSoon is Model for a request that need not wait for the model's
// tokenizer. A model read before comes back as Model returns it, with a
// nil Pending. Otherwise Model's read starts in the background (a
// verbose /api/show, megabytes that Ollama takes a while to send, and the
// tokenizer's build), and ModelSoon returns at once what a plain
// /api/show says, with the Pending that waits for the rest; where that
// fails too, it waits for Model.
func (b *Backend) ModelSoon(ctx context.Context, name string) (Details, *Pending) {
	c := &b.models
	c.mu.Lock()
	e, ok, ready := c.lookup(name, b.now())
	c.mu.Unlock()
	if ok && ready {
		return e.model, nil
	}
	// A model whose files were read before, under another name or by
	// another process (the tokenizer directory), is built without
	// asking Ollama for them: sooner than a plain /api/show, which
	// Ollama answers by reading the model's file.
	weights, digest := listed(ctx, b, name)
	if digest != "" {
		if te, _ := b.models.tokenizers.Get(digest + "@" + b.Version(ctx)); te != nil || b.disk.has(digest) {
			return b.Model(ctx, name), nil
		}
	}
	p := &Pending{ready: make(chan struct{})}
	go func() {
		p.whole = b.Model(context.WithoutCancel(ctx), name)
		close(p.ready)
	}()
	m := Details{Name: name, fetched: b.now()}
	var show exact.Show
	if _, err := b.JSON(ctx, http.MethodPost, "/api/show", map[string]any{"model": name}, &show, showLimit); err != nil {
		return p.Wait(ctx), nil
	}
	m.Weights, m.Digest = weights, digest
	m.Facts, m.Err = modelinfo.Parse(show.ModelInfo)
	m.Capabilities, m.NumCtx = show.Capabilities, modelfileNumCtx(show.Modelfile)
	show.Name, show.Version = name, b.Version(ctx)
	p.Details = m
	p.Sketch, _ = exact.Sketch(show)
	return m, p
}

// listed returns the size and digest b's /api/tags gives name; zeros when
// it lists no such model or cannot be read.
func listed(ctx context.Context, b *Backend, name string) (weights uint64, digest string) {
	if tags, err := tags(ctx, b); err == nil {
		for _, t := range tags {
			if t.Name == name || t.Model == name || t.Name == name+":latest" {
				weights, digest = t.Size, t.Digest
			}
		}
	}
	return weights, digest
}

func (b *Backend) fetch(ctx context.Context, name string) Details {
	// A long vocabulary takes a while to send; the fetch serves every
	// request of the model, so a client that leaves does not cancel it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	m := Details{Name: name, fetched: b.now()}
	m.Weights, m.Digest = listed(ctx, b, name)

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
