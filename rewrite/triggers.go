package rewrite

// Triggers and targets the way agent frameworks express them: besides
// strategy.threshold and strategy.target (shares of the window), trimming
// may start at a token count (strategy.trigger_tokens) or a message count
// (strategy.trigger_messages), and cut down to the newest N tokens
// (strategy.keep_tokens) or N messages (strategy.keep_messages).

// triggers turns the token triggers and targets of t's configuration into
// the shares of limit that Budget works with — the earliest trigger wins,
// and a keep_ target replaces strategy.target — so that hysteresis and
// prefetching apply to them unchanged. It also reports whether the
// message trigger fired (msgAct): a count, which Budget cannot express.
func (t *Trimmer) triggers(msgs []Message, limit int, th, target float64, c Counter) (float64, float64, bool) {
	cfg := t.cfg
	if limit <= 0 || (cfg.TriggerTokens <= 0 && cfg.TriggerMessages <= 0 && cfg.KeepTokens <= 0 && cfg.KeepMessages <= 0) {
		return th, target, false
	}
	l := float64(limit)
	if cfg.TriggerTokens > 0 {
		th = min(th, float64(cfg.TriggerTokens)/l)
	}
	lead := 0 // the leading system messages, which no strategy drops
	for i := range msgs {
		if !isSystem(&msgs[i]) {
			break
		}
		lead += cost(&msgs[i], c)
	}
	if cfg.KeepTokens > 0 || cfg.KeepMessages > 0 {
		keep := -1
		if cfg.KeepTokens > 0 {
			keep = lead + cfg.KeepTokens
		}
		if cfg.KeepMessages > 0 {
			n, kept := 0, lead
			for i := len(msgs) - 1; i >= 0 && n < cfg.KeepMessages; i-- {
				if !isSystem(&msgs[i]) {
					kept += cost(&msgs[i], c)
					n++
				}
			}
			if keep < 0 || kept < keep {
				keep = kept
			}
		}
		target = float64(keep) / l
	}
	target = min(target, th)
	msgAct := false
	if cfg.TriggerMessages > 0 {
		n := 0
		for i := range msgs {
			if !isSystem(&msgs[i]) {
				n++
			}
		}
		msgAct = n >= cfg.TriggerMessages
	}
	return th, target, msgAct
}
