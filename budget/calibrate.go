package budget

import (
	"math"
	"sync"
)

// Calibration is a model's learned correction from ctxproxy's raw
// estimate to what its backend counts: backend ≈ Offset + Ratio × raw.
//
// Local models do not use OpenAI's tokenizers and their chat templates add
// their own tokens, so a raw tiktoken count is off by a model-specific
// factor (Llama 3 ≈ 1.0, Mistral's SentencePiece ≈ 1.1–1.3 on English,
// more on code). The backend tells the truth after every response
// (Ollama's prompt_eval_count, OpenAI's usage.prompt_tokens); the
// correction learns it.
type Calibration struct {
	// Ratio is backend tokens per estimated token.
	Ratio float64
	// Offset is backend tokens per request not explained by Ratio: a
	// chat template's fixed preamble.
	Offset float64
	// Observations is how many responses it has learned from.
	Observations int
}

// Apply returns the corrected count for a raw estimate.
func (c Calibration) Apply(raw int) int {
	if raw <= 0 {
		return 0
	}
	return max(1, int(math.Round(c.Offset+c.Ratio*float64(raw))))
}

// scale returns the corrected count of a part of a prompt (a message):
// the ratio without the per-request offset.
func (c Calibration) scale(raw int) int {
	if raw <= 0 {
		return 0
	}
	return max(1, int(math.Round(c.Ratio*float64(raw))))
}

// Calibration bounds. A real backend's tokenizer is within a factor of
// about 3 of cl100k_base (a byte-level tokenizer is ~3.1 on English); a
// ratio outside the clamps means the observations are broken, not the
// tokenizer.
const (
	minRatio  = 0.25
	maxRatio  = 4
	minOffset = -256
	maxOffset = 8192
	// calibrationDecay weighs past observations: the tokenizer of a model
	// does not change, but the mix of prose, code and JSON it is sent
	// does, and recent conversations predict the next one best.
	calibrationDecay = 0.8
	// affineSpread is how much the estimates seen must vary (standard
	// deviation over mean) before an offset is fitted: with similar sizes,
	// offset and ratio cannot be told apart and the ratio alone predicts
	// best.
	affineSpread = 0.25
)

// calibrator learns one model's Calibration from observations, by
// exponentially weighted least squares. It is safe for concurrent use.
type calibrator struct {
	mu    sync.Mutex
	prior float64 // ratio before any observation (models.<m>.multiplier)
	ratio bool    // fit the ratio only (for comparison in tests)
	cur   Calibration
	// Exponentially weighted sums over observations (x raw, y reported).
	w, x, y, xx, xy float64
}

func newCalibrator(prior float64) *calibrator {
	if !(prior > 0) {
		prior = 1
	}
	prior = clamp(prior, minRatio, maxRatio)
	return &calibrator{prior: prior, cur: Calibration{Ratio: prior}}
}

func (c *calibrator) get() Calibration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// observe learns from one (raw estimate, reported) pair.
func (c *calibrator) observe(raw, reported int) {
	if raw <= 0 || reported <= 0 {
		return
	}
	x, y := float64(raw), float64(reported)
	c.mu.Lock()
	defer c.mu.Unlock()
	d := calibrationDecay
	c.w = d*c.w + 1
	c.x = d*c.x + x
	c.y = d*c.y + y
	c.xx = d*c.xx + x*x
	c.xy = d*c.xy + x*y
	c.cur.Observations++

	// Ratio of sums: larger prompts, where accuracy matters, weigh more.
	ratio, offset := c.y/c.x, 0.0
	if !c.ratio && c.cur.Observations >= 3 {
		mx, my := c.x/c.w, c.y/c.w
		vx := c.xx/c.w - mx*mx
		if vx > 0 && math.Sqrt(vx) >= affineSpread*mx {
			r := (c.xy/c.w - mx*my) / vx
			o := my - r*mx
			if r >= minRatio && r <= maxRatio && o >= minOffset && o <= maxOffset {
				ratio, offset = r, o
			}
		}
	}
	c.cur.Ratio = clamp(ratio, minRatio, maxRatio)
	c.cur.Offset = offset
}

func clamp(v, lo, hi float64) float64 {
	if math.IsNaN(v) {
		return lo
	}
	return math.Min(hi, math.Max(lo, v))
}

// Truncation margins: how far below the expected count a report must be
// to be read as truncation. Before calibration a local tokenizer can
// count up to ~40% fewer tokens than cl100k_base on some text (a 256k
// vocabulary on CJK); once calibrated, estimates are within ~5%, and the
// margin narrows to three times that.
const (
	marginUncalibrated = 0.40
	marginLearning     = 0.25
	marginCalibrated   = 0.15
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
// dropped part of it: reported < expected × (1 − margin).
//
// Ollama fits a prompt into num_ctx by dropping the oldest messages (and
// cutting a single oversized one) and still answers 200; its
// prompt_eval_count is then the truncated length. This is the only sign a
// client gets. Use a calibrated expected count and the margin for its
// calibration state (Registry.Observe does both).
func Truncated(expected, reported int, margin float64) bool {
	if expected <= 0 || reported <= 0 {
		return false
	}
	return float64(reported) < float64(expected)*(1-margin)
}
