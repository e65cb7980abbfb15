package rewrite

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Smart's fallback order (see Smart): when the first 2 and the last 10
// messages alone exceed the target, the first exchange and the newest turn
// stay, and the last 10 give way oldest first.
func TestSmartKeepsFirstExchangeBeforeTheTail(t *testing.T) {
	msgs := numbered(append([]Message{sys("s")}, alternating(30, 400)...)...) // 103 tokens a message
	// Room for the system prompt, the first exchange and about six more.
	res := apply(t, Composite{Strategies: []Strategy{Smart{Fill: true}, TokenBudget{KeepTurn: true}}}, msgs, 900)
	got := realIDs(res.Messages)
	if !slices.Equal(got[:3], []int{0, 1, 2}) {
		t.Fatalf("kept %v: the system prompt and the first exchange must come first", got)
	}
	// Then the newest messages, as many as fit, ending with the newest turn.
	tail := got[3:]
	if len(tail) == 0 || tail[len(tail)-1] != 30 {
		t.Fatalf("kept %v: the newest turn is missing", got)
	}
	for k := 1; k < len(tail); k++ {
		if tail[k] != tail[k-1]+1 {
			t.Errorf("kept %v: the tail must be the newest messages without a gap", got)
		}
	}
	if len(tail) >= 10 {
		t.Errorf("kept %v: the tail was not cut", got)
	}
	if tot := Total(res.Messages, counter); tot > 900 {
		t.Errorf("total %d > target 900", tot)
	}
}

// Step 3: what is never dropped exceeds the window; on_overflow: shrink
// cuts contents instead of dropping the first exchange.
func TestSmartFallbackEndsWithOnOverflow(t *testing.T) {
	msgs := numbered(sys("s"), user(lines(400)), asst(lines(400)), user("q2"), asst("a2"), user(lines(400)))
	tr := newTrimmer(t, Config{})
	res, err := tr.Trim(context.Background(), Request{Mode: "smart"}, msgs, 1200, counter) // 3 × ~1000 tokens
	if err != nil {
		t.Fatal(err)
	}
	got := realIDs(res.Messages)
	for _, want := range []int{0, 1, 2, 5} {
		if !slices.Contains(got, want) {
			t.Errorf("kept %v: message %d (system, first exchange, newest turn) dropped", got, want)
		}
	}
	if tot := Total(res.Messages, counter); tot > 1200 {
		t.Errorf("total %d exceeds the window", tot)
	}
	reject := newTrimmer(t, Config{OnOverflow: OverflowReject})
	if _, err := reject.Trim(context.Background(), Request{Mode: "smart"}, msgs, 1200, counter); err == nil {
		t.Error("on_overflow reject: no error")
	}
}

// The default pipeline (mode smart through the Trimmer) keeps the first
// exchange of a long conversation whatever the target.
func TestSmartModeKeepsFirstExchange(t *testing.T) {
	msgs := numbered(append([]Message{sys("s")}, alternating(41, 2000)...)...) // ~500 tokens a message
	tr := newTrimmer(t, Config{})
	for _, limit := range []int{2000, 3000, 5000, 8000} {
		res, err := tr.Trim(context.Background(), Request{}, msgs, limit, counter)
		if err != nil {
			t.Fatal(err)
		}
		got := realIDs(res.Messages)
		if diff := cmp.Diff([]int{0, 1, 2}, got[:3]); diff != "" {
			t.Errorf("limit %d: kept %v (-want +got):\n%s", limit, got, diff)
		}
		if got[len(got)-1] != 41 {
			t.Errorf("limit %d: newest turn missing from %v", limit, got)
		}
	}
}

// The selective notice: where selective dropped messages here and there
// and the token budget after it dropped more, the notice counts what was
// dropped rather than claiming a window ("Kept last 2 turns" of ten kept).
func TestSelectiveNoticeCounts(t *testing.T) {
	msgs := numbered(append([]Message{sys("s")}, alternating(30, 400)...)...)
	tr := newTrimmer(t, Config{})
	for _, limit := range []int{3000, 1500, 1000} {
		res, err := tr.Trim(context.Background(), Request{Mode: "selective"}, msgs, limit, counter)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("Context trimmed. Dropped %d of 31 messages.", res.Dropped)
		if res.Notice != want {
			t.Errorf("limit %d: notice %q, want %q", limit, res.Notice, want)
		}
		real := len(realIDs(res.Messages))
		if real+res.Dropped != len(msgs) {
			t.Errorf("limit %d: %d kept + %d dropped ≠ %d", limit, real, res.Dropped, len(msgs))
		}
	}
}
