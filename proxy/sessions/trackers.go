package sessions

import (
	"time"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/internal/cache"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// maxTrackedSessions bounds the sessions whose trackers are kept: session
// ids are client data.
const maxTrackedSessions = 100000

// Trackers are the running totals of the sessions, one per session served here:
// each turn is recorded into it, and the store keeps a copy of its totals
// (snapshots.Stats) for the admin API, /stats, the status page and other
// replicas. The least recently used sessions are forgotten first.
type Trackers struct {
	lru *cache.LRU[string, *budget.Tracker]
}

func NewTrackers() *Trackers {
	return &Trackers{lru: cache.New[string, *budget.Tracker](maxTrackedSessions)}
}

// Record adds turn to session id's tracker and returns the totals before
// it; a session not tracked here yet starts from nothing (Requests 0).
func (ts *Trackers) Record(id string, turn budget.Turn) (before budget.Totals) {
	tr, ok := ts.lru.Get(id)
	if !ok {
		// Only the running totals are kept here: the turn arrives counted,
		// so the tracker needs no counter or limits of its own.
		tr = new(budget.Tracker)
		ts.lru.Add(id, tr)
	}
	before, _ = tr.Record(turn)
	return before
}

// Active lists the sessions whose last request was answered within d.
func (ts *Trackers) Active(d time.Duration) []string {
	var out []string
	for id, tr := range ts.lru.All() {
		if time.Since(tr.Totals().LastRequest) < d {
			out = append(out, id)
		}
	}
	return out
}

// TotalsOf and StoredStats convert between the tracker's totals and the
// store's copy of them.
func TotalsOf(st snapshots.Stats) budget.Totals {
	t := budget.Totals{Tokens: st.Tokens, Sent: st.Sent, Limit: st.Limit, NumCtx: st.NumCtx,
		Dropped: st.Dropped, Summarized: st.Summarized, PromptTokens: st.PromptTokens,
		CompletionTokens: st.CompletionTokens, AllPromptTokens: st.AllPromptTokens, AllCompletionTokens: st.AllCompletionTokens,
		Requests: st.Requests, Truncations: st.Truncations,
		OverflowRetries: st.OverflowRetries, LastTruncation: st.LastTruncation}
	if st.PrefixKept != nil {
		t.PrefixKept, t.PrefixKnown = *st.PrefixKept, true
	}
	if st.CachedTokens != nil {
		t.CachedTokens, t.CachedKnown = *st.CachedTokens, true
	}
	if a := st.Budget; a != nil {
		t.Budget = *a
	}
	return t
}

func StoredStats(t budget.Totals) snapshots.Stats {
	st := snapshots.Stats{Tokens: t.Tokens, Sent: t.Sent, Limit: t.Limit, Usage: t.Usage(), NumCtx: t.NumCtx,
		Dropped: t.Dropped, Summarized: t.Summarized, PromptTokens: t.PromptTokens,
		CompletionTokens: t.CompletionTokens, AllPromptTokens: t.AllPromptTokens, AllCompletionTokens: t.AllCompletionTokens,
		Requests: t.Requests, Truncations: t.Truncations,
		OverflowRetries: t.OverflowRetries}
	if !t.LastTruncation.IsZero() {
		st.LastTruncation = t.LastTruncation.UTC()
	}
	if t.PrefixKnown {
		kept := t.PrefixKept
		st.PrefixKept = &kept
	}
	if t.CachedKnown {
		cached := t.CachedTokens
		st.CachedTokens = &cached
	}
	if b := t.Budget; b.Total > 0 {
		st.Budget = &b
	}
	return st
}
