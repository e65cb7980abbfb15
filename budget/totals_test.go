package budget

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// The last request's numbers replace the previous ones; the counts add
// up; a backend report and a truncation belong to their own request.
func TestTotalsAdd(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	var tot Totals
	tot = tot.Add(Turn{Tokens: 9000, Sent: 6000, Limit: 10000, NumCtx: 8192, Dropped: 4, Summarized: 2,
		PromptTokens: 6100, CompletionTokens: 50, Truncated: true, Retries: 1, At: t0})
	tot = tot.Add(Turn{Tokens: 7000, Sent: 7000, Limit: 10000, Retries: 2, At: t0.Add(time.Minute)})
	tot = tot.Add(Turn{Tokens: 7000, Sent: 7000, Limit: 10000, PromptTokens: 7010, CompletionTokens: 20, At: t0.Add(2 * time.Minute)})
	want := Totals{
		Tokens: 7000, Sent: 7000, Limit: 10000, PromptTokens: 7010, CompletionTokens: 20,
		Requests: 3, Truncations: 1, OverflowRetries: 3, AllPromptTokens: 13110, AllCompletionTokens: 70,
		LastTruncation: t0, LastRequest: t0.Add(2 * time.Minute),
	}
	if tot != want {
		t.Errorf("Totals = %+v\nwant     %+v", tot, want)
	}
	if u := tot.Usage(); u != 0.7 {
		t.Errorf("Usage = %v, want 0.7", u)
	}
	if u := (Totals{Tokens: 5}).Usage(); u != 0 {
		t.Errorf("Usage with no limit = %v, want 0", u)
	}
}

// Requests recorded at once from many goroutines are all counted, and
// each sees a distinct "before": the proxy decides once that usage first
// crossed its threshold.
func TestTrackerRecordConcurrent(t *testing.T) {
	var tr Tracker
	var wg sync.WaitGroup
	var mu sync.Mutex
	var befores []int
	for i := range 64 {
		wg.Go(func() {
			before, after := tr.Record(Turn{Tokens: i, Limit: 1000})
			if after.Requests != before.Requests+1 {
				t.Errorf("after %d requests, before %d", after.Requests, before.Requests)
			}
			mu.Lock()
			befores = append(befores, before.Requests)
			mu.Unlock()
		})
		// Reading meanwhile is safe too.
		wg.Go(func() { _ = tr.Totals() })
	}
	wg.Wait()
	if n := tr.Totals().Requests; n != 64 {
		t.Errorf("Requests = %d, want 64", n)
	}
	slices.Sort(befores)
	if len(slices.Compact(befores)) != 64 {
		t.Errorf("two requests saw the same totals before them")
	}
}
