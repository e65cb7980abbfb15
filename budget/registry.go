package budget

import (
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/internal/cache"
)

// maxModels bounds the per-model state a Registry keeps (calibration, the
// unknown-model warning), since model names come from clients. Past it,
// the least recently used model's state goes: the models in use keep
// what they learned through a flood of other names.
const maxModels = 4096

// Registry hands out counters and limits per model and keeps what it
// learns about each model: its calibration, and whether it was warned
// about. The proxy holds one for the life of the process. It is safe for
// concurrent use.
type Registry struct {
	cfg   Config
	log   *slog.Logger
	store *countStore // text counts, shared by every encoding

	// overrides are the models: section, sorted by name; SetModels
	// replaces them while requests read them.
	overrides atomic.Pointer[[]override]

	mu     sync.Mutex                   // makes finding and creating a model's state one step
	texts  map[string]tokenizer.Counter // by encoding
	models *cache.LRU[string, *modelState]

	// sharing publishes observations to the other replicas (Share).
	sharing sharing

	// newTiktoken builds an encoding; tests replace it to make loading fail.
	newTiktoken func(encoding string) (tokenizer.Counter, error)
}

type override struct {
	name string
	Model
}

type modelState struct {
	cal     *calibrator
	counter *MessageCounter
	warned  sync.Once
}

// NewRegistry returns a Registry for cfg (validate it first with
// Config.Validate). A nil log discards.
func NewRegistry(cfg Config, log *slog.Logger) *Registry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Registry{
		cfg:    cfg,
		log:    log,
		store:  newCountStore(cfg.CacheEntries),
		texts:  make(map[string]tokenizer.Counter),
		models: cache.New[string, *modelState](maxModels),
		newTiktoken: func(enc string) (tokenizer.Counter, error) {
			t, err := tokenizer.NewTiktoken(enc)
			if err != nil {
				return nil, err
			}
			return t, nil
		},
	}
	r.overrides.Store(sortedOverrides(cfg.Models))
	return r
}

// Encoding returns the encoding used for model: the configured one, or by
// family (EncodingFor) when it is auto.
func (r *Registry) Encoding(model string) string {
	if r.cfg.Encoding == "" || r.cfg.Encoding == EncodingAuto {
		return EncodingFor(model)
	}
	return r.cfg.Encoding
}

// CounterFor returns the text counter for model: a *Caching over the
// model's tiktoken encoding (cl100k_base for "claude-3-opus"), or over
// the approximate counter when the encoding is "approximate" or cannot
// load — then one warning is logged.
func (r *Registry) CounterFor(model string) tokenizer.Counter {
	enc := r.Encoding(model)
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.texts[enc]; ok {
		return c
	}
	var inner tokenizer.Counter = r.cfg.approx()
	if enc != tokenizer.EncodingApproximate {
		t, err := r.newTiktoken(enc)
		if err != nil {
			r.log.Warn("budget: tokenizer unavailable; approximating token counts",
				"encoding", enc, "chars_per_token", inner.(tokenizer.Approx).CharsPerToken, "err", err)
		} else {
			inner = t
		}
	}
	c := newCaching(inner, r.store)
	r.texts[enc] = c
	return c
}

// MessageCounter returns the counter of messages for model, corrected by
// the model's calibration. The proxy counts every intercepted request with
// it (Prompt) and hands it to the strategy as its rewrite.Counter.
func (r *Registry) MessageCounter(model string) *MessageCounter {
	st := r.state(model)
	r.mu.Lock()
	mc := st.counter
	r.mu.Unlock()
	if mc != nil {
		return mc
	}
	mc = NewMessageCounter(r.CounterFor(model), r.cfg.ImageTokens)
	mc.cal = st.cal
	r.mu.Lock()
	defer r.mu.Unlock()
	if st.counter == nil {
		st.counter = mc
	}
	return st.counter
}

// Observe records what the backend reported for a prompt estimated as
// sent: Ollama's prompt_eval_count or OpenAI's usage.prompt_tokens. Call it
// after each response that reports usage, with the Estimate of what was
// forwarded and the num_ctx it was sent with (0 if unknown).
//
// It returns true when the report looks like silent truncation (see
// Truncated; the margin narrows as the model's calibration matures): the
// proxy should then warn, count it and mark the session. Such a report is
// not learned from, so it cannot drag the correction down. Without a
// num_ctx, a third such report in a row is taken to mean the calibration
// is off (a user switched language, say) and is learned from instead.
func (r *Registry) Observe(model string, sent Estimate, reported, numCtx int) (truncated bool) {
	st := r.state(model)
	c := st.cal
	cal := c.get()
	if Truncated(cal.Apply(sent), reported, numCtx, margin(cal.Observations)) {
		c.mu.Lock()
		c.unexplained++
		n := c.unexplained
		c.mu.Unlock()
		if numCtx > 0 || n < unexplainedLimit {
			return true
		}
	}
	c.mu.Lock()
	c.unexplained = 0
	c.mu.Unlock()
	if Censored(reported, numCtx) {
		// At the window the backend may have cut the prompt to fit: the
		// report is a lower bound of the prompt, not a measurement, and
		// fitting it would drag the correction down.
		return false
	}
	if r.cfg.calibrate() {
		r.learn(Observation{Model: model, Raw: sent.Raw, Chars: sent.Chars, Reported: reported})
	}
	return false
}

// censorAt is the share of the window from which a reported prompt count
// is taken as censored.
const censorAt = 0.98

// Censored reports whether a backend's count of reported prompt tokens,
// under a window of numCtx tokens (0 if unknown), may have been capped at
// the window: Ollama cuts an overlong prompt to num_ctx and reports the
// cut length. Such a count says only that the prompt was at least that
// long.
func Censored(reported, numCtx int) bool {
	return numCtx > 0 && float64(reported) >= censorAt*float64(numCtx)
}

// Calibration returns model's current correction, for status output.
func (r *Registry) Calibration(model string) Calibration {
	return r.state(model).cal.get()
}

// Calibrations returns the correction of every model that has learned
// from at least one response, by model name.
func (r *Registry) Calibrations() map[string]Calibration {
	out := make(map[string]Calibration)
	for name, st := range r.models.All() {
		if c := st.cal.get(); c.Observations > 0 {
			out[name] = c
		}
	}
	return out
}

// CacheStats reports the shared cache of text counts.
func (r *Registry) CacheStats() CacheStats { return r.store.stats() }

// Window returns model's limits. trained is the model's trained context
// length when the backend told it (Ollama /api/show), else 0.
//
// In order of precedence: a models: override's fields; for a local model
// (no output limit in the table) the trained length, which is the model
// file's own fact and more precise than a family guess (phi3 comes in 4k
// and 128k variants); for a hosted model, the table capped by the trained
// length; an unknown model with a trained length gets that; an unknown
// model without one gets DefaultMaxTokens and one warning, the first time
// only. A model without an output limit of its own reserves
// Config.ReserveOutput for the reply. Config.Reserved is kept free from
// every model.
func (r *Registry) Window(model string, trained int) Window {
	l, known := Known(model)
	if trained > 0 {
		switch {
		case !known || l.MaxOutputTokens == 0:
			l.MaxTokens = trained
		default:
			l.MaxTokens = min(l.MaxTokens, trained)
		}
	}
	ov, has := r.override(model)
	if has && ov.MaxTokens > 0 {
		l.MaxTokens = ov.MaxTokens
	}
	if has && ov.MaxOutputTokens > 0 {
		l.MaxOutputTokens = ov.MaxOutputTokens
	}
	if l.MaxTokens == 0 {
		l.MaxTokens = DefaultMaxTokens
		r.state(model).warned.Do(func() {
			r.log.Warn("budget: unknown model; assuming default limits (set them under models:)",
				"model", model, "max_tokens", DefaultMaxTokens, "max_output_tokens", r.cfg.reserveOutput())
		})
	}
	if l.MaxOutputTokens == 0 {
		l.MaxOutputTokens = r.cfg.reserveOutput()
	}
	l.Reserved = r.cfg.Reserved
	return l
}

// state returns the remembered state of model, creating it.
func (r *Registry) state(model string) *modelState {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, ok := r.models.Get(model); ok {
		return st
	}
	var prior float64
	if ov, ok := r.override(model); ok {
		prior = ov.Multiplier
	}
	st := &modelState{cal: newCalibrator(prior)}
	r.models.Add(model, st)
	return st
}

// EncodingFor returns the tiktoken encoding that fits model: o200k_base for
// OpenAI's gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o-series and gpt-oss families,
// cl100k_base for everything else — gpt-4, gpt-3.5 and, as the closest
// general-purpose BPE, local and non-OpenAI models (Llama 3's tokenizer is
// derived from it); calibration corrects the rest.
func EncodingFor(model string) string {
	m := family(model)
	for _, p := range []string{"gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "gpt-oss", "o1", "o3", "o4"} {
		if strings.HasPrefix(m, p) {
			return tokenizer.EncodingO200K
		}
	}
	return tokenizer.EncodingCL100K
}
