package rewrite

// When the summaries of a step are written, and what a step folds: what
// summarize: says, apart from the Compactor that carries it out.

import (
	"fmt"
	"strings"
	"sync"

	"github.com/ctxproxy/ctxproxy/internal/cache"
)

// What summarize.schedule may say: when the summaries a step folds are
// written.
const (
	// ScheduleAuto writes them at the step when the summarizer is the
	// chat's own model on the chat's backend (ScheduleAtCut), ahead
	// otherwise. The default.
	ScheduleAuto = "auto"
	// ScheduleAhead writes them in the background as the conversation
	// nears the step (summarize.prefetch_at), so the step finds them
	// ready.
	ScheduleAhead = "ahead"
	// ScheduleAtCut writes them when the step is reached, in batches,
	// the step waiting for them (at most summarize.wait): the prompt is
	// read again from the cut then anyway, so the summarizer's calls evict
	// no cache that would have been kept.
	ScheduleAtCut = "at_cut"
)

// maxBatch is the most iterations one summarizer call condenses when the
// summaries are written at the step (ScheduleAtCut): the step waits for
// them, so it makes as few calls as it can.
const maxBatch = 8

// ahead reports whether the summaries for req are written ahead of their
// step (summarize.schedule).
func (c SummarizeConfig) ahead(req Request) bool {
	switch c.Schedule {
	case ScheduleAhead:
		return true
	case ScheduleAtCut:
		return false
	}
	return !c.shares(req)
}

// shares reports whether the summarizer's calls for req go to the model
// and backend the chat itself uses. Ollama then keeps one prompt cache for
// both (with its default of one request at a time): a summarizer call
// between two turns would make the next turn read its whole prompt again.
func (c SummarizeConfig) shares(req Request) bool {
	if c.Backend != "" {
		return false
	}
	m := c.Model
	return m == "" || strings.TrimSuffix(m, ":latest") == strings.TrimSuffix(req.Model, ":latest")
}

// batchSize is how many iterations one summarizer call for req condenses
// at most: one when written ahead, out of sight; maxBatch at the step,
// which waits for them.
func (c SummarizeConfig) batchSize(req Request) int {
	if c.ahead(req) {
		return 1
	}
	return maxBatch
}

func (c SummarizeConfig) perSummary() int { return min(c.MaxTokens, summaryEstimate) }

// blockLimit is the room for the block of summaries: a quarter of the
// effective limit, so that summaries never crowd out the conversation
// they stand for (16 summaries' worth when the limit is unknown: 0).
func (c SummarizeConfig) blockLimit(limit int) int {
	if limit > 0 {
		return limit / 4
	}
	return 16 * c.MaxTokens
}

// keepTokens is Hybrid's window of recent tokens, kept verbatim, under an
// effective limit of limit (0: unknown).
func (c SummarizeConfig) keepTokens(limit, target int) int {
	switch {
	case c.KeepRecentTokens > 0:
		return c.KeepRecentTokens
	case limit > 0:
		return limit / 3
	}
	return target / 2
}

// hybridFold returns how many of the oldest iterations Hybrid folds, and
// the step it is at. Hybrid keeps about keep_recent_tokens of the newest
// messages verbatim (keepTokens), in steps as Budget does: with R what the
// iterations cost (ahead tokens more, for a prefetch) and Q the Trimmer's
// step (Input.Step; half the kept tokens when unknown), it is at step
// k = ⌊(R − keep)/Q⌋ and folds the fewest oldest iterations worth at least
// k·Q. The verbatim part thus stays between about keep and keep + Q
// tokens, and what is folded changes once per Q of growth, not on every
// turn. The newest iteration is never folded.
func (c SummarizeConfig) hybridFold(v *conv, in Input, ahead int) (n, step int) {
	keep := c.keepTokens(in.Limit, in.Target)
	q := in.Step
	if q <= 0 {
		q = max(keep/2, 1)
	}
	r := ahead
	for i := range v.its {
		r += v.its[i].cost + v.pinnedCost(i)
	}
	if r <= keep {
		return 0, 0
	}
	k := (r - keep) / q
	if k == 0 {
		return 0, 0
	}
	sum := 0
	for i := range len(v.its) - 1 {
		sum += v.its[i].cost
		if sum >= k*q {
			return i + 1, k
		}
	}
	return len(v.its) - 1, k
}

// scope is what one background job is for: the session, or without one
// the conversation itself (the key of its first iteration).
func scopeOf(session string, v *conv) string {
	if session != "" {
		return "s:" + session
	}
	return "k:" + v.key(0)
}

// steps remembers, by scope, mode and step, how many iterations a step
// folded when it was reached (see Compactor.apply). It is safe for
// concurrent use.
type steps struct {
	mu  sync.Mutex
	lru *cache.LRU[string, int]
}

func newSteps() *steps { return &steps{lru: cache.New[string, int](cacheEntries)} }

// key names step of scope in mode summarize (hybrid false) or hybrid.
func (s *steps) key(scope string, hybrid bool, step int) string {
	return fmt.Sprintf("%s|%t|%d", scope, hybrid, step)
}

// held returns how many iterations the step key folded when it was
// reached.
func (s *steps) held(key string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Get(key)
}

// hold remembers that the step key folds n iterations until the next one.
func (s *steps) hold(key string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lru.Add(key, n)
}
