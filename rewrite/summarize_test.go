package rewrite

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// ignoreTokens compares messages without their cached counts.
var ignoreTokens = cmpopts.IgnoreFields(Message{}, "Tokens")

// What summarizing does, one behaviour a test: Compact and its dry run, the
// summarize and hybrid modes through a Trimmer, and the summary block.

func TestCompactSummarizesOldIterations(t *testing.T) {
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{KeepRecent: 5}, f, CompactorOptions{})
	msgs := alternating(50, hundred) // 25 iterations, well over any small budget
	got, err := c.Compact(t.Context(), session("s"), msgs, counter)
	if err != nil {
		t.Fatal(err)
	}
	// The last 10 messages (5 iterations) are kept as they were.
	if diff := cmp.Diff(rangeInts(40, 50), realIDs(got.Messages)); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	// Old messages are summarized, and the result holds the summary.
	first := got.Messages[0]
	if !first.Synthetic || first.Role != "system" || !strings.Contains(first.Content, "Summary of m0") {
		t.Errorf("first message is not the summary: %+v", first)
	}
	if f.count() != 20 || got.Summaries != 20 || got.Folded != 40 {
		t.Errorf("calls %d, summaries %d, folded %d; want 20, 20, 40", f.count(), got.Summaries, got.Folded)
	}
}

func TestCompactSkipsAShortConversation(t *testing.T) {
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{MinMessages: 6, KeepRecent: 1}, f, CompactorOptions{})
	msgs := alternating(5, hundred)
	got, err := c.Compact(t.Context(), session("s"), msgs, counter)
	if err != nil {
		t.Fatal(err)
	}
	if &got.Messages[0] != &msgs[0] || got.Folded != 0 {
		t.Errorf("compacted %d messages", got.Folded)
	}
	if f.count() != 0 {
		t.Errorf("%d summarizer calls, want none", f.count())
	}
}

func TestCompactReturnsTheOriginalOnFailure(t *testing.T) {
	var logs bytes.Buffer
	f := &fakeSummarizer{reply: func(context.Context, SummaryRequest) (string, error) {
		return "", errors.New("model exploded")
	}}
	c, _ := newCompactor(t, SummarizeConfig{}, f, CompactorOptions{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	msgs := alternating(20, hundred)
	got, err := c.Compact(t.Context(), session("s"), msgs, counter)
	if err == nil {
		t.Error("no error")
	}
	if &got.Messages[0] != &msgs[0] || len(got.Messages) != 20 || got.After != got.Before {
		t.Errorf("original messages not returned: %d messages", len(got.Messages))
	}
	if !strings.Contains(logs.String(), "model exploded") {
		t.Errorf("error not logged:\n%s", logs.String())
	}
	if s := c.Stats(); s.Failures != 1 {
		t.Errorf("Failures = %d, want 1", s.Failures)
	}
}

func TestSummarizeModeCompactsAboveThreshold(t *testing.T) {
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{}, f, CompactorOptions{})
	tr := summarizingTrimmer(t, Config{Mode: "summarize", Threshold: 0.9, Target: 0.6}, c)
	msgs := alternating(92, hundred) // 92% of 10000
	res, err := tr.Trim(t.Context(), session("s"), msgs, 10000, counter)
	if err != nil {
		t.Fatal(err)
	}
	if res.Summarized == 0 {
		t.Errorf("no compaction: %q", res.Notice)
	}
	if got := Total(res.Messages, counter); got >= 9200 {
		t.Errorf("usage did not decrease: %d", got)
	}
}

func TestSummarizeModeIsSummarizeThenTokenBudget(t *testing.T) {
	c, _ := newCompactor(t, SummarizeConfig{}, &fakeSummarizer{}, CompactorOptions{})
	tr := summarizingTrimmer(t, Config{Mode: "summarize"}, c)
	s, err := tr.Strategy("")
	if err != nil {
		t.Fatal(err)
	}
	cs, ok := s.(Composite)
	if !ok || len(cs.Strategies) != 2 {
		t.Fatalf("got %#v, want Composite{Summarize, TokenBudget}", s)
	}
	if sum, ok := cs.Strategies[0].(Summarize); !ok || sum.Compactor() != c {
		t.Errorf("first stage %#v is not the compactor's Summarize", cs.Strategies[0])
	}
	if _, ok := cs.Strategies[1].(TokenBudget); !ok {
		t.Errorf("second stage %#v is not TokenBudget", cs.Strategies[1])
	}
}

// approx35Counter estimates ceil(len/3.5) tokens per text.
type approx35Counter struct{}

func (approx35Counter) CountText(s string) int { return (2*len(s) + 6) / 7 }

func (sc approx35Counter) CountMessage(m *Message) int { return sc.CountText(m.Content) }

func TestDryRunWithAnotherCounter(t *testing.T) {
	if got := (approx35Counter{}).CountText("hello"); got != 2 {
		t.Errorf(`CountText("hello") = %d, want 2`, got)
	}
	msgs := alternating(10, 35) // 10 tokens each
	c, _ := newCompactor(t, SummarizeConfig{}, &fakeSummarizer{}, CompactorOptions{})
	if got, _ := c.Compact(t.Context(), Request{DryRun: true}, msgs, approx35Counter{}); got.Before != 100 {
		t.Errorf("thread estimate = %d, want 100", got.Before)
	}
}

func TestSummarizeStartsAtThreshold(t *testing.T) {
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{PrefetchAt: -1}, f, CompactorOptions{})
	tr := summarizingTrimmer(t, Config{Mode: "summarize"}, c)
	under := turns(39, hundred*2) // 79% of 20000
	res, err := tr.Trim(t.Context(), session("s"), under, 20000, counter)
	if err != nil || res.Summarized != 0 || f.count() != 0 {
		t.Errorf("below the threshold: %v, summarized %d, %d calls", err, res.Summarized, f.count())
	}
	over := turns(41, hundred*2)
	res, err = tr.Trim(t.Context(), session("s"), over, 20000, counter)
	if err != nil || res.Summarized == 0 {
		t.Errorf("above the threshold: %v, summarized %d", err, res.Summarized)
	}
}

func TestSummariesReplaceOldIterations(t *testing.T) {
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{KeepRecent: 3}, f, CompactorOptions{})
	msgs := turns(8, hundred)
	got, err := c.Compact(t.Context(), session("s"), msgs, counter)
	if err != nil {
		t.Fatal(err)
	}
	// The old iterations' messages are gone; the system prompt carries one
	// summary per old iteration.
	if diff := cmp.Diff(append([]int{0}, rangeInts(11, 17)...), ids(got.Messages)); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	block := blockOf(got.Messages)
	for i := range 5 {
		if !strings.Contains(block, "Summary of question "+string(rune('0'+i))) {
			t.Errorf("no summary of iteration %d in\n%s", i, block)
		}
	}
	// Each is a 2-3 sentence summary of one iteration.
	for i, req := range f.requests() {
		if len(req.Messages) != 2 || req.Messages[0].Role != "user" {
			t.Errorf("call %d folds %d messages, want one iteration", i, len(req.Messages))
		}
	}
	if sys, _ := (SummaryRequest{}).Prompt(); !strings.Contains(sys, "2 to 3 plain sentences") {
		t.Error("the prompt does not ask for 2-3 sentences")
	}
}

func TestCompactKeepsRecentIterationsUnchanged(t *testing.T) {
	msgs := turns(8, hundred)
	c, _ := newCompactor(t, SummarizeConfig{KeepRecent: 3}, &fakeSummarizer{}, CompactorOptions{})
	got, err := c.Compact(t.Context(), session("s"), msgs, counter)
	if err != nil {
		t.Fatal(err)
	}
	if got.Kept != 3 {
		t.Errorf("Kept = %d, want 3", got.Kept)
	}
	if diff := cmp.Diff(msgs[11:], got.Messages[1:], ignoreTokens); diff != "" {
		t.Errorf("recent iterations changed (-want +got):\n%s", diff)
	}
}

func TestContextInjection(t *testing.T) {
	got := ContextInjection([]string{"The user asked for X.", "The assistant did Y."}, 2)
	want := "<conversation_summary>\n" +
		"The earlier part of this conversation, summarized, oldest first:\n" +
		"- [2 earlier exchanges omitted]\n" +
		"- The user asked for X.\n" +
		"- The assistant did Y.\n" +
		"</conversation_summary>"
	if got != want {
		t.Errorf("ContextInjection =\n%s\nwant\n%s", got, want)
	}
	// It reaches the model appended to the system prompt, which keeps its
	// own text first.
	c, _ := newCompactor(t, SummarizeConfig{KeepRecent: 1}, &fakeSummarizer{}, CompactorOptions{})
	res, err := c.Compact(t.Context(), session("s"), turns(4, hundred), counter)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Messages[0]
	if !m.Edited || idOf(m) != 0 || !strings.HasPrefix(m.Content, "You are a helpful assistant.\n\n"+blockOpen) {
		t.Errorf("system prompt = %+v", m)
	}
}

func TestSummarizerUsesTheRequestModel(t *testing.T) {
	for _, tt := range []struct{ configured, want string }{{"", "llama3.1"}, {"qwen3:0.6b", "qwen3:0.6b"}} {
		f := &fakeSummarizer{}
		c, _ := newCompactor(t, SummarizeConfig{Model: tt.configured}, f, CompactorOptions{})
		if _, err := c.Compact(t.Context(), session("s"), turns(6, hundred), counter); err != nil {
			t.Fatal(err)
		}
		for _, req := range f.requests() {
			if req.Model != tt.want {
				t.Errorf("summarize.model %q: call with model %q, want %q", tt.configured, req.Model, tt.want)
			}
		}
	}
}

func TestSummarizeFallbackKeepsSystemPrompt(t *testing.T) {
	// When summaries cannot be had, the request is truncated: oldest
	// first, the system prompt kept.
	f := &fakeSummarizer{reply: func(context.Context, SummaryRequest) (string, error) { return "", errors.New("down") }}
	c, _ := newCompactor(t, SummarizeConfig{}, f, CompactorOptions{})
	tr := summarizingTrimmer(t, Config{Mode: "summarize"}, c)
	msgs := turns(30, hundred*2)
	res, err := tr.Trim(t.Context(), session("s"), msgs, 10000, counter)
	if err != nil {
		t.Fatal(err)
	}
	if idOf(res.Messages[0]) != 0 || res.Messages[0].Edited || res.Dropped == 0 || res.Summarized != 0 {
		t.Errorf("first %+v, dropped %d, summarized %d", res.Messages[0], res.Dropped, res.Summarized)
	}
	if got := Total(res.Messages, counter); got > 8000 {
		t.Errorf("total %d over the threshold", got)
	}
}

func TestHybridSummarizesOldKeepsRecent(t *testing.T) {
	c, _ := newCompactor(t, SummarizeConfig{KeepRecentTokens: 1000}, &fakeSummarizer{}, CompactorOptions{})
	tr := summarizingTrimmer(t, Config{Mode: "hybrid"}, c)
	msgs := turns(20, hundred*2) // 50 tokens a message
	res, err := tr.Trim(t.Context(), session("s"), msgs, 2500, counter)
	if err != nil {
		t.Fatal(err)
	}
	if res.Summarized == 0 || !strings.Contains(blockOf(res.Messages), "Summary of question 0") {
		t.Fatalf("old messages not summarized: %q", res.Notice)
	}
	// Recent messages are intact: the last ones, as sent.
	tail := res.Messages[len(res.Messages)-4:]
	if diff := cmp.Diff(msgs[len(msgs)-4:], tail, ignoreTokens); diff != "" {
		t.Errorf("recent messages changed (-want +got):\n%s", diff)
	}
}

func TestHybridKeepsRecentTokensVerbatim(t *testing.T) {
	const step = 500
	for _, keep := range []int{300, 1000, 2000} {
		c, _ := newCompactor(t, SummarizeConfig{KeepRecentTokens: keep}, &fakeSummarizer{}, CompactorOptions{})
		msgs := turns(30, hundred*2)
		res, err := c.Hybrid().Apply(t.Context(), Input{Messages: msgs, Counter: counter, Step: step, Request: session("s")})
		if err != nil {
			t.Fatal(err)
		}
		verbatim := Total(res.Messages[1:], counter)
		// About keep tokens stay uncompressed, at most a step more: what
		// is folded moves in steps. The fold ends at an iteration (two
		// messages), so the kept part may fall short of keep by one.
		it := 2 * counter.CountMessage(&msgs[1])
		if verbatim < keep-it || verbatim >= keep+step {
			t.Errorf("keep_recent_tokens %d: %d tokens kept verbatim, want %d to %d", keep, verbatim, keep-it, keep+step)
		}
	}
}

func TestCompactReportsTokensBeforeAndAfter(t *testing.T) {
	c, _ := newCompactor(t, SummarizeConfig{}, &fakeSummarizer{}, CompactorOptions{})
	msgs := turns(12, hundred)
	got, err := c.Compact(t.Context(), session("s"), msgs, counter)
	if err != nil {
		t.Fatal(err)
	}
	if got.Before != Total(msgs, counter) || got.After != Total(got.Messages, counter) || got.After >= got.Before {
		t.Errorf("Before %d, After %d; conversation %d → %d", got.Before, got.After, Total(msgs, counter), Total(got.Messages, counter))
	}
}

// TestCompactDryRun: a dry run calls no summarizer and predicts the
// compaction, within the documented error of a stand-in (a few tokens
// per summary where the real ones are as long as expected), and exactly
// once the summaries are written.
func TestCompactDryRun(t *testing.T) {
	f := &fakeSummarizer{reply: func(_ context.Context, req SummaryRequest) (string, error) {
		return pad("A summary. ", summaryEstimate*4-8), nil // as long as expected
	}}
	c, _ := newCompactor(t, SummarizeConfig{}, f, CompactorOptions{})
	msgs := turns(12, hundred)
	dry := session("s")
	dry.DryRun = true
	est, err := c.Compact(t.Context(), dry, msgs, counter)
	if err != nil {
		t.Fatal(err)
	}
	if f.count() != 0 || c.Stats() != (SummaryStats{}) {
		t.Fatalf("a dry run called the summarizer %d times; stats %+v", f.count(), c.Stats())
	}
	got, err := c.Compact(t.Context(), session("s"), msgs, counter)
	if err != nil {
		t.Fatal(err)
	}
	if d := est.After - got.After; d < -est.Summaries*2 || d > est.Summaries*2 {
		t.Errorf("estimated %d tokens, compacted to %d", est.After, got.After)
	}
	if est.Folded != got.Folded || est.Summaries != got.Summaries || est.Before != got.Before || est.Notice != got.Notice {
		t.Errorf("estimate %+v, compaction %+v", est, got)
	}
	// Once the summaries exist, the dry run is exact.
	if again, _ := c.Compact(t.Context(), dry, msgs, counter); again.After != got.After || f.count() != got.Summaries {
		t.Errorf("dry run with summaries known = %d, want %d", again.After, got.After)
	}
}

func TestSummarizeAutomaticAtThreshold(t *testing.T) {
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{PrefetchAt: -1}, f, CompactorOptions{})
	tr := summarizingTrimmer(t, Config{Mode: "summarize", Threshold: 0.8}, c)
	ctx, req := t.Context(), session("s")
	for n := 10; n <= 60; n++ {
		msgs := turns(n, hundred*2)
		total := Total(msgs, counter)
		res, err := tr.Trim(ctx, req, msgs, 20000, counter)
		if err != nil {
			t.Fatal(err)
		}
		if at := total >= 16000; at != (res.Summarized > 0) {
			t.Errorf("%d tokens of 20000: summarized %d", total, res.Summarized)
		}
	}
}

// TestTrimDryRun: a dry run of Trim, as a compress asks for it (cut to the
// target now), writes no summary, starts no job and moves no counter, and
// predicts what the real run then does: exactly for a trimming strategy,
// and for summarize and hybrid within a few tokens per summary where the
// summaries are as long as expected, exactly once they are written.
func TestTrimDryRun(t *testing.T) {
	const limit = 10000
	msgs := turns(40, hundred*2)
	for _, mode := range []string{"smart", "summarize", "hybrid"} {
		t.Run(mode, func(t *testing.T) {
			f := &fakeSummarizer{reply: func(_ context.Context, req SummaryRequest) (string, error) {
				return pad("A summary. ", summaryEstimate*4-8), nil // as long as expected
			}}
			c, _ := newCompactor(t, SummarizeConfig{}, f, CompactorOptions{})
			tr := summarizingTrimmer(t, Config{Mode: mode}, c)
			req := session("s")
			req.Threshold, req.Wait = tr.Target(), true
			dry := req
			dry.DryRun = true

			est, err := tr.Trim(t.Context(), dry, msgs, limit, counter)
			if err != nil {
				t.Fatal(err)
			}
			idle(c)
			if f.count() != 0 || c.Stats() != (SummaryStats{}) {
				t.Fatalf("the dry run called the summarizer %d times; stats %+v", f.count(), c.Stats())
			}
			got, err := tr.Trim(t.Context(), req, msgs, limit, counter)
			if err != nil {
				t.Fatal(err)
			}
			if est.Dropped == 0 || est.Dropped != got.Dropped || est.Summarized != got.Summarized || est.Notice != got.Notice {
				t.Errorf("dry run: dropped %d, summarized %d, %q\nreal run: dropped %d, summarized %d, %q",
					est.Dropped, est.Summarized, est.Notice, got.Dropped, got.Summarized, got.Notice)
			}
			summaries := summariesIn(got.Notice)
			if d := Total(est.Messages, counter) - Total(got.Messages, counter); d < -2*summaries || d > 2*summaries {
				t.Errorf("dry run: %d tokens, real run: %d (%d summaries)", Total(est.Messages, counter), Total(got.Messages, counter), summaries)
			}
			if mode == "smart" {
				if diff := cmp.Diff(got, est); diff != "" {
					t.Errorf("a trimming strategy's dry run differs (-real +dry):\n%s", diff)
				}
				return
			}
			if summaries == 0 {
				t.Fatalf("nothing summarized: %q", got.Notice)
			}
			// With the summaries written, the dry run is the real run.
			idle(c)
			calls := f.count()
			again, err := tr.Trim(t.Context(), dry, msgs, limit, counter)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(got, again); diff != "" || f.count() != calls {
				t.Errorf("dry run with the summaries written (-real +dry):\n%s", diff)
			}
		})
	}
}
