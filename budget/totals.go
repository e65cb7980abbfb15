package budget

import (
	"math"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// Turn is what one forwarded request of a conversation adds to its
// running totals: the numbers of that request, as the proxy measured them
// and the backend reported them.
type Turn struct {
	// Tokens is the prompt as the client sent it, Sent what was forwarded
	// after trimming, Limit the effective limit, NumCtx the num_ctx set
	// (0: none).
	Tokens, Sent, Limit, NumCtx int
	// Dropped counts the messages removed before forwarding, Summarized
	// those folded into summaries (not counted in Dropped).
	Dropped, Summarized int
	// PromptTokens and CompletionTokens are the backend's report; 0 when
	// it sent none.
	PromptTokens, CompletionTokens int
	// Truncated says the backend cut the prompt itself (its prompt tokens
	// far below what was sent).
	Truncated bool
	// Retries counts resends after the backend refused the prompt as
	// longer than its window.
	Retries int
	// At is when the request was answered.
	At time.Time
	// PrefixKept is the share of the forwarded prompt that the previous
	// one forwarded began with (what the backend's prompt cache can
	// keep), when PrefixKnown.
	PrefixKept  float64
	PrefixKnown bool
	// CachedTokens are the prompt tokens the backend says it reused from
	// its prompt cache (Ollama 0.30 and later), when CachedKnown: its own
	// measure of what PrefixKept estimates.
	CachedTokens int
	CachedKnown  bool
	// Budget is how the request's window was divided (the
	// X-Ctxproxy-Budget header); the zero Budget when it was not counted.
	Budget adminapi.Budget
}

// Totals are a conversation's running totals: the numbers of its last
// request, and counts over all of them. They are a value, so a store can
// keep them and another replica carry them on (Add).
type Totals struct {
	// The last request's numbers (see Turn).
	Tokens, Sent, Limit, NumCtx    int
	Dropped, Summarized            int
	PromptTokens, CompletionTokens int
	// Requests, Truncations and OverflowRetries count over all requests;
	// AllPromptTokens and AllCompletionTokens add up the backend's reports.
	Requests, Truncations, OverflowRetries int
	AllPromptTokens, AllCompletionTokens   int
	// LastTruncation is when the backend last cut a prompt; LastRequest
	// when the last request was answered.
	LastTruncation, LastRequest time.Time
	// Budget is the last request's allocation of its window.
	Budget adminapi.Budget
	// PrefixKept is the last request's Turn.PrefixKept, kept from an
	// earlier request when the last did not measure it.
	PrefixKept  float64
	PrefixKnown bool
	// CachedTokens is the last request's Turn.CachedTokens, when
	// CachedKnown (that request's backend said).
	CachedTokens int
	CachedKnown  bool
}

// Add returns the totals after turn.
func (t Totals) Add(turn Turn) Totals {
	next := Totals{
		Tokens: turn.Tokens, Sent: turn.Sent, Limit: turn.Limit, NumCtx: turn.NumCtx,
		Dropped: turn.Dropped, Summarized: turn.Summarized,
		PromptTokens: turn.PromptTokens, CompletionTokens: turn.CompletionTokens,
		Requests: t.Requests + 1, Truncations: t.Truncations, OverflowRetries: t.OverflowRetries + max(turn.Retries, 0),
		AllPromptTokens:     t.AllPromptTokens + max(turn.PromptTokens, 0),
		AllCompletionTokens: t.AllCompletionTokens + max(turn.CompletionTokens, 0),
		LastTruncation:      t.LastTruncation, LastRequest: turn.At, Budget: turn.Budget,
		PrefixKept: t.PrefixKept, PrefixKnown: t.PrefixKnown,
		CachedTokens: turn.CachedTokens, CachedKnown: turn.CachedKnown,
	}
	if turn.PrefixKnown {
		next.PrefixKept, next.PrefixKnown = turn.PrefixKept, true
	}
	if turn.PromptTokens <= 0 {
		// A report is of one answer: without one, the last is unknown,
		// not the one before.
		next.PromptTokens, next.CompletionTokens = 0, 0
	}
	if turn.Truncated {
		next.Truncations++
		next.LastTruncation = turn.At
	}
	return next
}

// Usage is the last request's prompt, as sent, as a fraction of its
// effective limit (1.2 is 120%); 0 when the limit is unknown.
func (t Totals) Usage() float64 {
	if t.Limit <= 0 {
		return 0
	}
	u := float64(t.Tokens) / float64(t.Limit)
	if math.IsInf(u, 0) || math.IsNaN(u) {
		return 0
	}
	return u
}

// Tracker holds one session's running totals as the proxy saw its
// requests (Record, Totals). Its zero value is ready for use, and it is
// safe for concurrent use.
type Tracker struct {
	mu     sync.Mutex
	totals Totals
}

// Record adds one request's numbers to the conversation's totals and
// returns the totals before and after, in one step: of two requests of a
// session answered at once, each sees the other's, never the same
// "before" (the proxy takes a snapshot when usage first crosses its
// threshold, and must decide that once).
func (t *Tracker) Record(turn Turn) (before, after Totals) {
	t.mu.Lock()
	defer t.mu.Unlock()
	before = t.totals
	t.totals = t.totals.Add(turn)
	return before, t.totals
}

// Totals returns the running totals.
func (t *Tracker) Totals() Totals {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.totals
}
