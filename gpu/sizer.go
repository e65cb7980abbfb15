package gpu

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/ctxproxy/ctxproxy/internal/cache"
	"github.com/ctxproxy/ctxproxy/modelinfo"
)

// Workload is what the proxy knows about the model a request names, from
// Ollama's API; the gpu package itself makes no HTTP calls.
type Workload struct {
	Name string
	// Server names the server the model runs on, whose memory the
	// Reading is: with several servers behind ctxproxy one model has a
	// held num_ctx (and hysteresis) on each, since each has its own
	// free memory. "" for a single backend.
	Server string
	// Facts come from /api/show model_info (modelinfo.Parse). Zero facts
	// mean unknown.
	Facts modelinfo.Facts
	// Weights is the size of the model's weights in bytes (/api/tags
	// size); 0 when unknown. Whether the model is loaded, and with what
	// num_ctx, comes from the Reading (MonitorOptions.Loaded).
	Weights uint64
	// Window is the context window the model table or the models:
	// section gives the model; when its facts are unknown (a model
	// /api/show does not know, a backend that is down) num_ctx is sized
	// to it rather than to min_size. 0 when unknown too.
	Window int
	// NumCtx is the model's own num_ctx (its Modelfile's PARAMETER
	// num_ctx, in /api/show), 0 when it sets none. With
	// context.model_num_ctx ceiling it caps num_ctx as the trained
	// length does: a user who wrote it chose it.
	NumCtx int
}

// GuessCap bounds the num_ctx given a model whose facts are unknown (so
// its KV cache cannot be sized against free memory): 8192 tokens, what
// nearly every chat model holds and a few GiB of KV cache at most.
const GuessCap = 8192

// Decision is the num_ctx chosen for one model and why.
type Decision struct {
	Model string
	// NumCtx is the num_ctx to send; 0 means leave it as the client and
	// Ollama have it (auto_size off and no target_size).
	NumCtx int
	// Limit is the largest num_ctx that fits in memory, within max_size
	// and the trained context length, before bucketing; 0 when unknown.
	Limit int
	// BytesPerToken is the model's KV-cache cost per token; 0 when its
	// facts are unknown.
	BytesPerToken uint64
	// Headroom is the memory this model's KV cache may take: free memory
	// (plus what a reload gives back, when loaded; less its weights, when
	// not) less the safety buffer. Valid when Limit > 0.
	Headroom uint64
	// Auto says NumCtx was sized from memory rather than fixed.
	Auto bool
	// Level is the memory guard's level the decision saw.
	Level Level
	// Reason explains NumCtx for logs, `ctxproxy gpu` and the status page.
	Reason string
	// Guessed says the model's facts were unknown and NumCtx is a guess
	// (the model table's window, target_size or min_size): the client
	// and the log should hear of it.
	Guessed bool
}

// Client returns the num_ctx to forward when the client sent its own n: n
// is kept when it fits (n ≤ Limit, or the limit is unknown) and lowered to
// NumCtx otherwise, with a reason for the warning. n ≤ 0 means the client
// sent none, and NumCtx is returned.
func (d Decision) Client(n int) (numCtx int, reason string) {
	switch {
	case n <= 0:
		return d.NumCtx, ""
	case d.Limit == 0 || n <= d.Limit || d.NumCtx == 0:
		return n, ""
	}
	lowered := d.NumCtx
	if lowered > d.Limit {
		lowered = d.Limit
	}
	return lowered, fmt.Sprintf("client num_ctx %d does not fit (at most %d for %s); lowered to %d", n, d.Limit, d.Model, lowered)
}

// Sizer chooses num_ctx per model from a memory Reading,
// holding each model's choice steady so Ollama does not reload it on every
// wobble of free memory. It is safe for concurrent use.
//
// Sizing: num_ctx = floor((available − vram_buffer) / bytes_per_token),
// where available is free memory less the model's weights when it is not
// loaded, or free memory plus its KV cache (and compute buffers) when the
// snapshot lists it as loaded, since a reload gives those back. Without
// the loaded models in the snapshot, a model Ollama loaded looks like
// memory gone and its num_ctx would fall after every load and rise after
// every unload: wire MonitorOptions.Loaded. The result is capped by
// max_size, the trained context length and, with auto_size, target_size;
// rounded down to a multiple of Bucket; and raised to min_size.
//
// Hysteresis: a model's num_ctx moves to another bucket only when two
// consecutive samples (not requests) both call for a move the same way,
// and then by the smaller of the two moves. One exception: when the held
// num_ctx no longer fits in free memory even counting the safety buffer,
// it drops at once, since waiting 5 s risks Ollama spilling layers to the
// CPU or failing to load. While the guard is at the shrink level num_ctx
// stays one bucket below the held value and does not move up.
//
// Unknown model facts or no memory sample: the model keeps its last
// num_ctx; a model never sized gets target_size if set, else min_size, the
// size that is always safe.
type Sizer struct {
	cfg Config

	mu       sync.Mutex
	override *int   // nil: config; 0: auto; n > 0: fixed at n
	epoch    uint64 // bumped by SetTarget and SetAuto
	models   *cache.LRU[string, *modelState]
}

// stateKey is the key of what a Sizer holds for m: its model's name
// alone for a single backend, the server's name and the model's apart
// for one of several.
func stateKey(m Workload) string {
	if m.Server == "" {
		return m.Name
	}
	return m.Server + "\x00" + m.Name
}

// maxModels bounds the models a Sizer remembers. Clients choose model
// names; the least recently used go first, so the models in use keep
// their held num_ctx (forgetting it would let the next sample move it and
// make Ollama reload the model).
const maxModels = 256

type modelState struct {
	held    int    // num_ctx in use; 0 until first sized from memory
	pending int    // bucket one sample called for; 0 when none
	seq     uint64 // Reading.Seq last counted

	// The last decision and what it was made from: requests between two
	// samples get it again without rebuilding the reason.
	last    Decision
	lastKey decisionKey
}

type decisionKey struct {
	seq, epoch, bpt, weights uint64
	contextLength, numCtx    int
}

// NewSizer returns a Sizer; zero fields of cfg mean their defaults.
func NewSizer(cfg Config) *Sizer {
	return &Sizer{cfg: cfg.withDefaults(), models: cache.New[string, *modelState](maxModels)}
}

// ErrBadSize is returned by SetTarget for a size that is not positive.
var ErrBadSize = errors.New("gpu: context size must be positive")

// SetTarget fixes num_ctx at n for every model from now on (`/context size
// N`). It is still capped by max_size and the trained
// context length, raised to min_size, and stepped down by the guard.
func (s *Sizer) SetTarget(n int) error {
	if n <= 0 {
		return fmt.Errorf("%w: %d", ErrBadSize, n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.override = &n
	s.epoch++
	return nil
}

// SetAuto turns sizing from memory on (`/context auto`).
// Models are sized afresh from the next snapshot.
func (s *Sizer) SetAuto() {
	s.mu.Lock()
	defer s.mu.Unlock()
	zero := 0
	s.override = &zero
	s.epoch++
	for _, st := range s.models.All() {
		st.held, st.pending, st.seq = 0, 0, 0
	}
}

// Mode reports whether sizing is automatic and, when it is not, the fixed
// target (0: num_ctx is left alone).
func (s *Sizer) Mode() (auto bool, target int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode()
}

func (s *Sizer) mode() (auto bool, target int) {
	if s.override != nil {
		return *s.override == 0, *s.override
	}
	if *s.cfg.AutoSize {
		return true, s.cfg.TargetSize
	}
	return false, s.cfg.TargetSize
}

// Forget drops what the Sizer holds for a model, on every server, so
// that its next decision starts afresh.
func (s *Sizer) Forget(model string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k := range s.models.All() {
		if k == model || strings.HasSuffix(k, "\x00"+model) {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		s.models.Remove(k)
	}
}

// Decide returns the num_ctx for m under snap. It is cheap (no I/O) and
// meant for the request path.
func (s *Sizer) Decide(m Workload, snap Reading) Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cfg
	auto, target := s.mode()
	k := stateKey(m)
	st, ok := s.models.Get(k)
	if !ok {
		st = &modelState{}
		s.models.Add(k, st)
	}
	bpt := m.Facts.BytesPerToken(c.KVQuantization, c.NumParallel)
	key := decisionKey{seq: snap.Seq, epoch: s.epoch, bpt: bpt, weights: m.Weights, contextLength: m.Facts.ContextLength, numCtx: m.NumCtx}
	if snap.Seq > 0 && key == st.lastKey {
		return st.last
	}
	d := s.decide(m, snap, st, auto, target, bpt)
	st.last, st.lastKey = d, key
	return d
}

// decide makes a decision for m under snap; the caller holds s.mu.
func (s *Sizer) decide(m Workload, snap Reading, st *modelState, auto bool, target int, bpt uint64) Decision {
	c := s.cfg

	d := Decision{Model: m.Name, BytesPerToken: bpt, Auto: auto, Level: snap.Level}
	lower := c.MinSize
	upper := c.MaxSize
	if n := m.Facts.ContextLength; n > 0 {
		lower, upper = min(lower, n), min(upper, n)
	}
	// The model's own num_ctx: the user's ceiling for it.
	ceiling := 0
	if n := m.NumCtx; n > 0 && c.ModelNumCtx == ModelNumCtxCeiling && n < upper {
		ceiling = n
		lower, upper = min(lower, n), n
	}
	var why strings.Builder

	// The memory fit, whenever it can be known: Decision.Client uses it
	// in every mode.
	var fit, fitNoBuffer uint64
	known := bpt > 0 && snap.OK()
	if known {
		var headroom uint64
		fit, fitNoBuffer, headroom = s.fit(m, snap, bpt, &why)
		d.Headroom = headroom
		d.Limit = int(min(fit, uint64(upper)))
		if d.Limit == 0 {
			// Nothing fits: 0 would read as "unknown".
			d.Limit = 1
		}
	}

	switch {
	case !auto && target == 0:
		why.Reset()
		why.WriteString("auto_size off and no target_size: num_ctx left to the client and Ollama")
		d.Reason = why.String()
		return d
	case !auto:
		why.Reset()
		d.NumCtx = clampInt(target, lower, upper)
		fmt.Fprintf(&why, "fixed size %d", target)
		if d.NumCtx != target {
			fmt.Fprintf(&why, " (kept within [%d, %d]: %d)", lower, upper, d.NumCtx)
		}
		if known && d.NumCtx > d.Limit {
			fmt.Fprintf(&why, "; more than fits in memory (%d)", d.Limit)
		}
		d.NumCtx = s.guardStep(d.NumCtx, lower, snap, &why)
		d.Reason = why.String()
		return d
	case !known:
		why.Reset()
		switch {
		case bpt == 0:
			why.WriteString("model facts unknown")
			if m.Facts.Architecture != "" {
				fmt.Fprintf(&why, " (%s)", m.Facts.Architecture)
			}
		case snap.Err != nil:
			fmt.Fprintf(&why, "no memory sample (%v)", snap.Err)
		default:
			why.WriteString("no memory sample yet")
		}
		d.Guessed = bpt == 0
		switch {
		case st.held > 0:
			d.NumCtx = st.held
			fmt.Fprintf(&why, ": keeping %d", st.held)
		case target > 0:
			d.NumCtx = clampInt(target, lower, upper)
			fmt.Fprintf(&why, ": target_size %d", d.NumCtx)
		case bpt == 0 && m.Window > 0:
			// min_size would leave a silently tiny window for a model
			// that is merely unknown to the backend's /api/show; its
			// whole table window (128k for many) could not be sized
			// against memory and might not fit. GuessCap is between.
			d.NumCtx = clampInt(min(m.Window, GuessCap), lower, upper)
			fmt.Fprintf(&why, ": num_ctx %d from the model table's window %d, at most %d while memory cannot be sized for it "+
				"(set context.target_size, or models.%s.max_tokens)", d.NumCtx, m.Window, GuessCap, m.Name)
		default:
			d.NumCtx = lower
			fmt.Fprintf(&why, ": min_size %d", lower)
		}
		d.NumCtx = s.guardStep(d.NumCtx, lower, snap, &why)
		d.Reason = why.String()
		return d
	}

	// Auto: clamp, bucket, then hysteresis. A cap is a size someone
	// chose (the model's own num_ctx, its trained length, max_size,
	// target_size): it is kept as it is, not rounded down to a bucket.
	n := fit
	capped := false
	if n > uint64(upper) {
		n, capped = uint64(upper), true
		switch {
		case upper == ceiling:
			fmt.Fprintf(&why, ", capped by the model's own num_ctx %d (context.model_num_ctx: ceiling)", upper)
		case upper == m.Facts.ContextLength && upper < c.MaxSize:
			fmt.Fprintf(&why, ", capped by context_length %d", upper)
		default:
			fmt.Fprintf(&why, ", capped by max_size %d", upper)
		}
	}
	if target > 0 && n > uint64(target) {
		n, capped = uint64(target), true
		fmt.Fprintf(&why, ", capped by target_size %d", target)
	}
	b := int(n)
	if !capped {
		b = int(n / Bucket * Bucket)
		if b != int(n) {
			fmt.Fprintf(&why, ", bucket %d", b)
		}
	}
	if b < lower {
		b = lower
		switch {
		case lower < c.MinSize && lower == ceiling:
			fmt.Fprintf(&why, ", raised to the model's own num_ctx %d", lower)
		case lower < c.MinSize:
			fmt.Fprintf(&why, ", raised to context_length %d", lower)
		default:
			fmt.Fprintf(&why, ", raised to min_size %d", lower)
		}
	}
	danger := uint64(st.held) > fitNoBuffer
	prev := st.held
	moved := st.step(b, snap.Seq, danger, snap.Level < LevelShrink)
	switch {
	case prev == 0:
	case moved && danger && st.held < prev:
		fmt.Fprintf(&why, "; dropped from %d at once: it no longer fits even in the safety buffer", prev)
	case moved:
		fmt.Fprintf(&why, "; moved from %d after two samples", prev)
	case st.held != b:
		fmt.Fprintf(&why, "; holding %d until two samples agree on a move", st.held)
	}
	d.NumCtx = s.guardStep(st.held, lower, snap, &why)
	d.Reason = why.String()
	return d
}

// fit writes the sizing formula to why and returns the tokens that fit
// with and without the safety buffer and the bytes available to the cache.
func (s *Sizer) fit(m Workload, snap Reading, bpt uint64, why *strings.Builder) (fit, fitNoBuffer, headroom uint64) {
	avail := snap.Free()
	fmt.Fprintf(why, "free %s", formatBytes(avail))
	if lm, loaded := snap.Model(m.Name); loaded {
		if n, what := reclaimable(lm, m.Weights, bpt, snap.Probe); n > 0 {
			avail += n
			fmt.Fprintf(why, " + %s %s", what, formatBytes(n))
		}
	} else if m.Weights > 0 {
		fmt.Fprintf(why, " − weights %s", formatBytes(m.Weights))
		avail -= min(avail, m.Weights)
	}
	buf := s.cfg.VRAMBuffer
	headroom = avail - min(avail, buf)
	fit = headroom / bpt
	fmt.Fprintf(why, " − buffer %s = %s / %s per token → %d", formatBytes(buf), formatBytes(headroom), formatBytes(bpt), fit)
	return fit, avail / bpt, headroom
}

// guardStep lowers n one bucket while the guard is at the shrink level or
// above, never below lower.
func (s *Sizer) guardStep(n, lower int, snap Reading, why *strings.Builder) int {
	if snap.Level < LevelShrink || n <= lower {
		return n
	}
	down := max((n-1)/Bucket*Bucket, lower)
	fmt.Fprintf(why, "; memory guard at %s (usage %.0f%%): one bucket down to %d", snap.Level, snap.Usage()*100, down)
	return down
}

// step advances the hysteresis with the bucket b of the sample seq and
// reports whether held moved. Samples already counted change nothing.
func (st *modelState) step(b int, seq uint64, danger, allowUp bool) bool {
	if seq == st.seq && st.held != 0 {
		return false
	}
	st.seq = seq
	prev := st.held
	switch {
	case st.held == 0:
		st.held, st.pending = b, 0
	case b == st.held:
		st.pending = 0
	case b < st.held && danger:
		st.held, st.pending = b, 0
	case b > st.held && !allowUp:
		st.pending = 0
	case st.pending != 0 && (st.pending > st.held) == (b > st.held):
		if b > st.held {
			st.held = min(b, st.pending)
		} else {
			st.held = max(b, st.pending)
		}
		st.pending = 0
	default:
		st.pending = b
	}
	return st.held != prev
}

// reclaimable is the memory a loaded model gives back on the device when
// Ollama reloads it with another num_ctx: its memory beyond its weights
// (KV cache and compute buffers) when the weights are known, so that the
// sizing before and after a load agree exactly; else num_ctx × bytes per
// token from /api/ps context_length. Never more than its memory on the
// device.
func reclaimable(lm modelinfo.Loaded, weights, bpt uint64, probe string) (n uint64, what string) {
	held := onDevice(lm, probe)
	switch {
	case weights > 0 && held > weights:
		return held - weights, "its memory beyond weights"
	case lm.NumCtx > 0 && bpt > 0:
		return min(uint64(lm.NumCtx)*bpt, held), "its KV cache"
	}
	return 0, ""
}

func clampInt(n, lo, hi int) int {
	return max(min(n, hi), lo)
}

// formatBytes writes a byte count with one decimal in the largest binary
// unit that keeps it ≥ 1.
func formatBytes(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
