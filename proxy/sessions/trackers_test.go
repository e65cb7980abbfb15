package sessions

import (
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/google/go-cmp/cmp"
)

// TestStoredStatsRoundTrip: the store's copy of a tracker's totals reads
// back as the same totals, so a session carries on its counts across a
// restart or another replica.
func TestStoredStatsRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tot := budget.Totals{}.Add(budget.Turn{Tokens: 900, Sent: 700, Limit: 1000, NumCtx: 2048, Dropped: 3,
		Summarized: 2, PromptTokens: 701, CompletionTokens: 40, Truncated: true, Retries: 1, At: at})
	st := StoredStats(tot)
	if st.Usage != 0.9 || st.Requests != 1 || st.Truncations != 1 || !st.LastTruncation.Equal(at) {
		t.Errorf("stored %+v", st)
	}
	back := TotalsOf(st)
	tot.LastRequest = time.Time{} // the store keeps no time of the last request
	if diff := cmp.Diff(tot, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	next := StoredStats(back.Add(budget.Turn{Tokens: 100, Limit: 1000, At: at.Add(time.Minute)}))
	if next.Requests != 2 || next.Truncations != 1 || next.OverflowRetries != 1 || next.PromptTokens != 0 {
		t.Errorf("after a second turn: %+v", next)
	}
}

// TestTrackersActive: a session is active while its last request is
// recent, and the first turn of a session starts from nothing.
func TestTrackersActive(t *testing.T) {
	ts := NewTrackers()
	if before := ts.Record("a", budget.Turn{Tokens: 10, Limit: 100, At: time.Now()}); before.Requests != 0 {
		t.Errorf("first turn's before: %+v", before)
	}
	if before := ts.Record("a", budget.Turn{Tokens: 20, Limit: 100, At: time.Now()}); before.Requests != 1 || before.Tokens != 10 {
		t.Errorf("second turn's before: %+v", before)
	}
	ts.Record("old", budget.Turn{At: time.Now().Add(-time.Hour)})
	if got := ts.Active(10 * time.Minute); len(got) != 1 || got[0] != "a" {
		t.Errorf("active: %v", got)
	}
}
