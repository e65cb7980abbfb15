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

// Untouched returns the most tokens a whole prompt may count, under an
// effective limit of limit, for Trim to leave its conversation as it is
// whatever its messages: the threshold's share of limit (under
// threshold, when set, instead of the configured one), or trigger_tokens
// when that comes first. It is 0 when message counts can start a cut
// too (trigger_messages, keep_tokens, keep_messages). A prompt within it
// needs no count to be forwarded whole: the messages' part of it is below
// the threshold of what the prompt's fixed part leaves (see Trim).
func (t *Trimmer) Untouched(limit int, threshold float64) int {
	cfg := t.cfg
	if limit <= 0 || cfg.TriggerMessages > 0 || cfg.KeepTokens > 0 || cfg.KeepMessages > 0 {
		return 0
	}
	th := Request{Threshold: threshold}.threshold(cfg.Threshold)
	n := int(th * float64(limit))
	if cfg.TriggerTokens > 0 {
		n = min(n, cfg.TriggerTokens)
	}
	return max(n, 0)
}
