package rewrite

import "context"

// Prefetcher is a Strategy that can prepare, off the request path, what a
// later trim will need (Summarize and Hybrid: the summaries). Trimmer.Trim
// calls Prefetch itself — on requests below the threshold too — once the
// conversation is within (threshold − PrefetchAt)·limit tokens of its next
// trim step (see Budget), with the target that step will cut to; never in
// a dry run. Prefetch must return at once.
type Prefetcher interface {
	Strategy
	// PrefetchAt is the usage, as a share of the limit, from which the
	// first trim step is prepared; later steps are prepared the same
	// distance ahead. Zero or less turns prefetching off.
	PrefetchAt() float64
	// Prefetch starts the work that cutting in.Messages to in.Target will
	// need, for in.Request.
	Prefetch(ctx context.Context, in Input)
}

// Summarize is the strategy of mode summarize: it folds the oldest iterations into 2-3 sentence summaries, which reach
// the model as a delimited block in the system prompt, keeping at least
// keep_recent iterations verbatim. The Trimmer runs it first and trimming
// after it (Composite{Summarize, TokenBudget}), so whatever summaries
// cannot save — or could not be written in time — is trimmed.
//
// It folds the fewest iterations that bring the conversation to the
// target. As the Trimmer's targets move in steps (Budget), the same
// iterations stay folded, and the system prompt unchanged, until the
// conversation has grown by a step; then the next iterations fold at once.
// What a step folds is held until the next step, so the forwarded prefix,
// and the backend's prompt cache, move only at a step.
//
// When the summaries are written is summarize.schedule's choice
// (ScheduleAuto). At the step (the default when the summarizer is the
// chat's own model on its backend): the step waits for them, at most
// summarize.wait, written a batch of iterations a call; a summarizer call
// between two steps would evict the conversation's prompt cache, while at
// the step the prompt is read again from the cut anyway. Ahead: in the
// background as the conversation nears the step (Prefetch: from
// summarize.prefetch_at, or PrefetchTurns turns' growth ahead), one
// iteration a call, so the request that reaches it finds them ready; only
// the first fold of a conversation waits, and a later step whose
// summaries are late folds those that are ready and trims the rest until
// the next step.
//
// In a dry run (Request.DryRun) Summarize and Hybrid fold what they would,
// each summary not written yet standing in at the length a summary is
// expected to have: min(summarize.max_tokens, 80) tokens. The answer is
// then an estimate, off by how much each real summary differs from that
// length (and by what the trimming after the fold then keeps or drops in
// its place), and it assumes every summary gets written: a real run
// trims instead where summaries are not written in time or the
// summarizer fails. With every summary written, it is exact.
type Summarize struct{ c *Compactor }

// Summarize returns the strategy of mode summarize.
func (c *Compactor) Summarize() Summarize { return Summarize{c} }

// Name implements Strategy.
func (Summarize) Name() string { return "summarize" }

// Apply implements Strategy.
func (s Summarize) Apply(ctx context.Context, in Input) (Result, error) {
	return s.c.apply(ctx, in, false)
}

// PrefetchAt implements Prefetcher.
func (s Summarize) PrefetchAt() float64 { return s.c.cfg.PrefetchAt }

// Prefetch implements Prefetcher.
func (s Summarize) Prefetch(ctx context.Context, in Input) {
	s.c.prefetch(in, false)
}

// Compactor returns the engine behind s.
func (s Summarize) Compactor() *Compactor { return s.c }

// Hybrid is the strategy of mode hybrid: it keeps about the newest
// messages worth summarize.keep_recent_tokens verbatim and folds every
// older iteration into summaries, like a summary buffer. What it folds
// moves in the Trimmer's steps (see hybridFold), not on every turn, and
// its summaries are written as Summarize's are.
type Hybrid struct{ c *Compactor }

// Hybrid returns the strategy of mode hybrid.
func (c *Compactor) Hybrid() Hybrid { return Hybrid{c} }

// Name implements Strategy.
func (Hybrid) Name() string { return "hybrid" }

// Apply implements Strategy.
func (h Hybrid) Apply(ctx context.Context, in Input) (Result, error) {
	return h.c.apply(ctx, in, true)
}

// PrefetchAt implements Prefetcher.
func (h Hybrid) PrefetchAt() float64 { return h.c.cfg.PrefetchAt }

// Prefetch implements Prefetcher.
func (h Hybrid) Prefetch(ctx context.Context, in Input) {
	h.c.prefetch(in, true)
}

// Compactor returns the engine behind h.
func (h Hybrid) Compactor() *Compactor { return h.c }

var (
	_ Prefetcher = Summarize{}
	_ Prefetcher = Hybrid{}
)

// prefetcherOf returns the Prefetcher s is or holds (a Composite's stage).
func prefetcherOf(s Strategy) Prefetcher {
	switch s := s.(type) {
	case Prefetcher:
		return s
	case Composite:
		for _, st := range s.Strategies {
			if p := prefetcherOf(st); p != nil {
				return p
			}
		}
	}
	return nil
}

// PrefetchTurns is how many turns' growth ahead of a trim step its
// summaries are started at least, whatever summarize.prefetch_at says: a
// turn's growth is the mean cost of the newest iterations, so a
// conversation of long tool results is prepared further ahead than a chat.
const PrefetchTurns = 4

// prefetchLead is how many tokens before a trim step the summaries it
// needs are started: (threshold − prefetchAt)·limit, or PrefetchTurns
// turns' growth when that is more. Zero turns prefetching off.
func prefetchLead(limit int, threshold, prefetchAt float64, growth int) int {
	if limit <= 0 || prefetchAt <= 0 {
		return 0
	}
	lead := max(int((threshold-prefetchAt)*float64(limit)), 0)
	return max(lead, PrefetchTurns*growth)
}

// turnGrowth is what one turn adds to msgs, predicted as the mean cost of
// its newest complete iterations (up to three: a user message and all
// that followed it up to the next), or 0 when it has none.
func turnGrowth(msgs []Message, c Counter) int {
	const sample = 3
	var users []int
	for i := len(msgs) - 1; i >= 0 && len(users) <= sample; i-- {
		if msgs[i].Role == roleUser {
			users = append(users, i)
		}
	}
	if len(users) < 2 {
		return 0
	}
	// users is newest first; the iterations lie between consecutive ones.
	total := Total(msgs[users[len(users)-1]:users[0]], c)
	return total / (len(users) - 1)
}

// nextStep says whether a conversation of total tokens is within lead
// tokens of its next trim step, and what that step will cut it to.
// Budget drops n·Q tokens at step n (Q = (threshold−target)·limit, T =
// target·limit), and step n+1 begins at T + (n+1)·Q; it will cut to what
// the conversation is then less (n+1)·Q, which is what a prefetch now,
// with the same oldest iterations, must save.
func nextStep(total, limit int, threshold, target float64, lead int) (int, bool) {
	if limit <= 0 || lead <= 0 {
		return 0, false
	}
	t := int(target * float64(limit))
	q := int((threshold - target) * float64(limit))
	if q <= 0 { // no hysteresis: every step cuts to the target
		return t, float64(total) >= threshold*float64(limit)-float64(lead)
	}
	n := 0
	if float64(total) >= threshold*float64(limit) {
		n = max((total-t)/q, 0)
	}
	at := t + (n+1)*q
	return total - (n+1)*q, total >= at-lead
}
