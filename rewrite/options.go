package rewrite

// Threshold is the configured share of the effective limit at which
// trimming starts.
func (t *Trimmer) Threshold() float64 { return t.cfg.Threshold }

// Target is the configured share of the effective limit trimming cuts to.
func (t *Trimmer) Target() float64 { return t.cfg.Target }

// Mode is the configured strategy mode.
func (t *Trimmer) Mode() string { return t.cfg.Mode }

// OnOverflow is the configured strategy.on_overflow.
func (t *Trimmer) OnOverflow() string { return t.cfg.OnOverflow }
