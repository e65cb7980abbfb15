package backend

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/modelinfo"
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
