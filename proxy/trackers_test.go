package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ctxproxy/ctxproxy/budget"
)

// TestStoredStatsRoundTrip: the store's copy of a tracker's totals reads
// back as the same totals, so a session carries on its counts across a
// restart or another replica.
func TestStoredStatsRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tot := budget.Totals{}.Add(budget.Turn{Tokens: 900, Sent: 700, Limit: 1000, NumCtx: 2048, Dropped: 3,
		Summarized: 2, PromptTokens: 701, CompletionTokens: 40, Truncated: true, Retries: 1, At: at})
	st := storedStats(tot)
	if st.Usage != 0.9 || st.Requests != 1 || st.Truncations != 1 || !st.LastTruncation.Equal(at) {
		t.Errorf("stored %+v", st)
	}
	back := totalsOf(st)
	tot.LastRequest = time.Time{} // the store keeps no time of the last request
	if diff := cmp.Diff(tot, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	next := storedStats(back.Add(budget.Turn{Tokens: 100, Limit: 1000, At: at.Add(time.Minute)}))
	if next.Requests != 2 || next.Truncations != 1 || next.OverflowRetries != 1 || next.PromptTokens != 0 {
		t.Errorf("after a second turn: %+v", next)
	}
}

// TestTrackersActive: a session is active while its last request is
// recent, and the first turn of a session starts from nothing.
func TestTrackersActive(t *testing.T) {
	ts := newTrackers()
	if before := ts.record("a", budget.Turn{Tokens: 10, Limit: 100, At: time.Now()}); before.Requests != 0 {
		t.Errorf("first turn's before: %+v", before)
	}
	if before := ts.record("a", budget.Turn{Tokens: 20, Limit: 100, At: time.Now()}); before.Requests != 1 || before.Tokens != 10 {
		t.Errorf("second turn's before: %+v", before)
	}
	ts.record("old", budget.Turn{At: time.Now().Add(-time.Hour)})
	if got := ts.active(10 * time.Minute); len(got) != 1 || got[0] != "a" {
		t.Errorf("active: %v", got)
	}
}

// TestBudgetAllocation: each counted request says how its window was
// divided (seed 001's context budget) in X-Ctxproxy-Budget, its parts
// add up to the window and to the tokens forwarded, and the session's
// stats keep the last one.
func TestBudgetAllocation(t *testing.T) {
	e := newAdminEnv(t, "")
	body, _ := json.Marshal(map[string]any{"model": tinyModel, "stream": false, "messages": []any{
		map[string]string{"role": "system", "content": strings.Repeat("You are terse. ", 20)},
		map[string]string{"role": "user", "content": "hello there"}}})
	resp := post(t, e.ts.URL+"/api/chat", body, map[string]string{"X-Session-ID": "alloc"})
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	var total, system, tools, reserve, conv, avail int
	if _, err := fmt.Sscanf(resp.Header.Get("X-Ctxproxy-Budget"), "total=%d system=%d tools=%d reserve=%d conversation=%d available=%d",
		&total, &system, &tools, &reserve, &conv, &avail); err != nil {
		t.Fatalf("X-Ctxproxy-Budget %q: %v", resp.Header.Get("X-Ctxproxy-Budget"), err)
	}
	sent, _ := strconv.Atoi(resp.Header.Get("X-Ctxproxy-Tokens"))
	if system == 0 || system+tools+conv != sent || system+tools+reserve+conv+avail != total || total != 2000 || reserve != 100 {
		t.Errorf("budget total %d = system %d + tools %d + reserve %d + conversation %d + available %d; %d tokens sent",
			total, system, tools, reserve, conv, avail, sent)
	}
	if err := e.writer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := e.json("GET", sessionPath("alloc"), nil, 200)["stats"].(map[string]any)
	b, ok := st["budget"].(map[string]any)
	if !ok || int(b["system"].(float64)) != system || int(b["available"].(float64)) != avail {
		t.Errorf("stats budget %v, header system %d available %d", st["budget"], system, avail)
	}
}
