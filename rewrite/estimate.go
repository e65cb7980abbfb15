package rewrite

// Estimate predicts the token count a compression would leave, without
// compressing. No route of the proxy
// calls it yet; it lives apart from Compact so that wiring it (a dry run
// of compress) or dropping it touches this file alone.

// Estimate predicts what Compact would do, without calling the summarizer:
// remembered summaries count at their length, the others at
// the expected length of a summary.
func (c *Compactor) Estimate(msgs []Message, cnt Counter) Compaction {
	v, n := c.compactPlan(msgs, cnt)
	out := Compaction{Before: Total(msgs, cnt), Kept: len(v.its) - n, Summaries: n}
	out.After = out.Before
	if n == 0 || c.sum == nil {
		out.Kept, out.Summaries = len(v.its), 0
		return out
	}
	keys := v.keysTo(n)
	texts := make([]string, n)
	missing := 0
	c.mu.Lock()
	for i, k := range keys {
		if s, ok := c.summaries.Get(k); ok {
			texts[i] = s.Text
		} else {
			missing++ // an empty line, counted at the expected length
		}
	}
	c.mu.Unlock()
	res := v.fold(texts, c.blockLimit(0))
	out.Folded, out.After = res.Summarized, Total(res.Messages, cnt)+missing*c.perSummary()
	out.Notice = res.Notice
	return out
}
