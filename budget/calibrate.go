package budget

import (
	"math"
	"sync"
)

// Calibration is a model's learned correction from ctxproxy's raw
// estimate to what its backend counts: backend ≈ Offset + Ratio × raw,
// where raw is the tiktoken count or, when that has predicted this backend
// worse, the characters/4 count (Basis).
//
// Local models do not use OpenAI's tokenizers and their chat templates add
// their own tokens, so a raw tiktoken count is off by a model-specific
// factor (Llama 3 ≈ 1.0, Mistral's SentencePiece ≈ 1.1–1.3 on English,
// more on code). The backend tells the truth after every response
// (Ollama's prompt_eval_count, OpenAI's usage.prompt_tokens); the
// correction learns it. Two fits are learned side by side, one over each
// raw count, because backends differ in kind: for a BPE tokenizer the
// tiktoken count is the better predictor whatever the text, but for a
// tokenizer that works closer to bytes (on code, on scripts cl100k_base
// splits finely) the character count is. The fit that explains the
// reports seen clearly better is used (TestCalibrationBases measures it).
type Calibration struct {
	// Ratio is backend tokens per raw token.
	Ratio float64
	// Offset is backend tokens per request not explained by Ratio: a
	// chat template's fixed preamble.
	Offset float64
	// Basis is the raw count Ratio applies to: BasisTokens or BasisChars.
	Basis string
	// Observations is how many responses it has learned from.
	Observations int
	// Error is the recent mean relative error of the basis in use, 0
	// before two observations.
	Error float64
}

// Raw counts a Calibration can apply to.
const (
	BasisTokens = "tokens"
	BasisChars  = "chars"
)

// Apply returns the corrected count of a whole prompt.
func (c Calibration) Apply(e Estimate) int {
	n := c.scale(e.Raw, e.Chars)
	if n == 0 {
		return 0
	}
	return max(1, n+int(math.Round(c.Offset)))
}

// scale returns the corrected count of a part of a prompt (a message,
// without the per-request offset) whose raw tiktoken count is tokens and
// characters/4 count chars.
func (c Calibration) scale(tokens, chars int) int {
	raw := tokens
	if c.Basis == BasisChars {
		raw = chars
	}
	if raw <= 0 {
		return 0
	}
	r := c.Ratio
	if !(r > 0) {
		r = 1
	}
	return max(1, int(math.Round(r*float64(raw))))
}

// Calibration bounds. A real backend's tokenizer is within a factor of
// about 3 of cl100k_base (a byte-level one is ~3.1 on English); a ratio
// outside the clamps means the observations are broken, not the
// tokenizer.
const (
	minRatio = 0.25
	maxRatio = 4
	// A chat template's fixed preamble: Llama 3.1 adds a dated system
	// header of ~25 tokens, tool instructions add a few hundred.
	minOffset = -64
	maxOffset = 4096
	// offsetRidge is the weight, in observations, of the prior that there
	// is no offset.
	offsetRidge = 0.1
	// switchMargin: the characters basis is used only from three reports
	// on and while its fit's residual is under this fraction of the
	// tiktoken basis's, so that a few lucky reports do not move a BPE
	// backend off the basis that fits it.
	switchMargin = 0.5
	// calibrationDecay weighs past observations: the tokenizer of a model
	// does not change, but the mix of prose, code and languages it is sent
	// does, and recent conversations predict the next one best.
	calibrationDecay = 0.8
)

// calibrator learns one model's Calibration. It is safe for concurrent use.
type calibrator struct {
	mu    sync.Mutex
	prior float64 // ratio before any observation (models.<m>.multiplier)
	cur   Calibration
	bases [2]basis // tokens, chars
	// only, when 1 or 2, pins the basis (tokens, chars) for the test
	// that compares them.
	only int
	// unexplained counts reports in a row that looked truncated without
	// a known window.
	unexplained int
}

// basis is the fit reported ≈ offset + ratio × raw over one raw count,
// from exponentially weighted sums of the observations, and the weighted
// mean relative error of its predictions.
type basis struct {
	w, x, y, xx, xy, yy float64
	err, errW           float64
	ratio, offset       float64
	seen                int
}

// rss returns the weighted residual sum of squares of the current fit: how
// well this basis explains the reports seen. Both bases explain the same
// reports, so their residuals compare directly.
func (b *basis) rss() float64 {
	r, o := b.ratio, b.offset
	return b.yy - 2*o*b.y - 2*r*b.xy + o*o*b.w + 2*o*r*b.x + r*r*b.xx
}

// predict returns the basis's estimate for a raw count.
func (b *basis) predict(raw float64) float64 { return b.offset + b.ratio*raw }

// fit solves the weighted least squares for offset and ratio, with a
// ridge of offsetRidge observations pulling the offset to 0: when the
// prompts seen are all of a size, the offset cannot be told from the ratio
// and the ratio alone explains them; when they vary, the data decide. A
// fit outside the bounds falls back to the ratio of sums.
func (b *basis) fit() {
	ratio, offset := b.y/b.x, 0.0
	sw := b.w + offsetRidge
	if det := sw*b.xx - b.x*b.x; det > 0 {
		o := (b.y*b.xx - b.x*b.xy) / det
		r := (sw*b.xy - b.x*b.y) / det
		if r >= minRatio && r <= maxRatio && o >= minOffset && o <= maxOffset {
			ratio, offset = r, o
		}
	}
	b.ratio, b.offset = clamp(ratio, minRatio, maxRatio), offset
}

func newCalibrator(prior float64) *calibrator {
	if !(prior > 0) {
		prior = 1
	}
	prior = clamp(prior, minRatio, maxRatio)
	c := &calibrator{prior: prior, cur: Calibration{Ratio: prior, Basis: BasisTokens}}
	for i := range c.bases {
		c.bases[i].ratio = prior
	}
	return c
}

func (c *calibrator) get() Calibration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// observe learns from the backend's report for a prompt estimated as e.
func (c *calibrator) observe(e Estimate, reported int) {
	if reported <= 0 || e.Raw <= 0 {
		return
	}
	y := float64(reported)
	c.mu.Lock()
	defer c.mu.Unlock()
	d := calibrationDecay
	for i, raw := range [2]int{e.Raw, e.Chars} {
		b := &c.bases[i]
		if raw <= 0 {
			continue
		}
		x := float64(raw)
		if b.seen > 0 {
			b.err = d*b.err + math.Abs(b.predict(x)-y)/y
			b.errW = d*b.errW + 1
		}
		b.w = d*b.w + 1
		b.x = d*b.x + x
		b.y = d*b.y + y
		b.xx = d*b.xx + x*x
		b.xy = d*b.xy + x*y
		b.yy = d*b.yy + y*y
		b.fit()
		b.seen++
	}
	c.cur.Observations++
	use := 0
	t, ch := &c.bases[0], &c.bases[1]
	if t.seen >= 3 && ch.seen >= 3 && ch.rss() < switchMargin*t.rss() {
		use = 1
	}
	if c.only > 0 {
		use = c.only - 1
	}
	b := &c.bases[use]
	c.cur.Ratio, c.cur.Offset = b.ratio, b.offset
	c.cur.Basis = [2]string{BasisTokens, BasisChars}[use]
	if b.errW > 0 {
		c.cur.Error = b.err / b.errW
	}
}

func clamp(v, lo, hi float64) float64 {
	if math.IsNaN(v) {
		return lo
	}
	return math.Min(hi, math.Max(lo, v))
}

// Truncation margins: how far below the expected count a report must be
// to be read as truncation. Before calibration a local tokenizer can count
// a third fewer tokens than cl100k_base on some text (o200k-sized
// vocabularies on non-English text); once calibrated, estimates are within
// about 5% on steady traffic, but a user switching language or from prose
// to code moves the ratio by up to 20%.
const (
	marginUncalibrated = 0.50
	marginLearning     = 0.35
	marginCalibrated   = 0.25
	// unexplainedLimit is how many reports in a row may look truncated,
	// with no num_ctx to explain them, before they are taken as a sign
	// that the calibration is off rather than the backend truncating.
	unexplainedLimit = 3
	// minWindow is the smallest context window assumed when it is not
	// known: Ollama's smallest default num_ctx is 2048.
	minWindow = 1024
)

// margin returns the truncation margin for a model with n observations.
func margin(n int) float64 {
	switch {
	case n == 0:
		return marginUncalibrated
	case n < 3:
		return marginLearning
	default:
		return marginCalibrated
	}
}

// Truncated reports whether a backend that was sent a prompt expected to
// cost expected tokens, and reported evaluating only reported tokens,
// dropped part of it: reported < expected × (1 − margin). When the
// backend's window numCtx is known (> 0), truncation also needs a prompt
// that could exceed it — expected × (1 + margin) > numCtx — and a report
// within it, since Ollama cuts only prompts longer than num_ctx and cuts
// them to fit; when it is not known, a prompt of more than 1024 tokens.
//
// Ollama fits a prompt into num_ctx by dropping the oldest messages (and
// cutting a single oversized one) and still answers 200; its
// prompt_eval_count is then the truncated length. This is the only sign a
// client gets. Registry.Observe applies it with a calibrated expected
// count and the margin for the model's calibration state.
func Truncated(expected, reported, numCtx int, margin float64) bool {
	if expected <= 0 || reported <= 0 || float64(reported) >= float64(expected)*(1-margin) {
		return false
	}
	if numCtx > 0 {
		return reported <= numCtx && float64(expected)*(1+margin) > float64(numCtx)
	}
	// No backend runs a window this small unless the request says so (and
	// then numCtx is known); a short prompt is off by estimation error,
	// not cut.
	return expected > minWindow
}
