package rewrite

import "context"

type thresholdKey struct{}

// WithThreshold returns a context under which Trimmer.Trim starts trimming
// at threshold instead of the configured strategy.threshold. The proxy
// lowers it while GPU memory is under pressure (the memory guard's
// compress level, 80% of VRAM by default: compress earlier).
func WithThreshold(ctx context.Context, threshold float64) context.Context {
	return context.WithValue(ctx, thresholdKey{}, threshold)
}

// threshold is the trimming threshold in force under ctx.
func threshold(ctx context.Context, configured float64) float64 {
	if t, ok := ctx.Value(thresholdKey{}).(float64); ok && t > 0 && t <= 1 {
		return t
	}
	return configured
}

// Threshold is the configured share of the effective limit at which
// trimming starts.
func (t *Trimmer) Threshold() float64 { return t.cfg.Threshold }

// Target is the configured share of the effective limit trimming cuts to.
func (t *Trimmer) Target() float64 { return t.cfg.Target }

// Mode is the configured strategy mode.
func (t *Trimmer) Mode() string { return t.cfg.Mode }

// OnOverflow is the configured strategy.on_overflow.
func (t *Trimmer) OnOverflow() string { return t.cfg.OnOverflow }
