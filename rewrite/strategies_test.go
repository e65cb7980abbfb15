package rewrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// What each strategy keeps and drops, one behaviour a test: sliding
// window, token budget, smart, selective, composite, tool results,
// importance, and the Trimmer that picks and runs them. A "turn" in a
// notice is one message.

func apply(t *testing.T, s Strategy, msgs []Message, target int) Result {
	t.Helper()
	res, err := s.Apply(context.Background(), Input{Messages: msgs, Target: target, Counter: counter})
	if err != nil {
		t.Fatalf("%s.Apply: %v", s.Name(), err)
	}
	return res
}

// realIDs returns the ids of the messages that are not synthetic.
func realIDs(msgs []Message) []int {
	var out []int
	for _, m := range msgs {
		if !m.Synthetic {
			out = append(out, idOf(m))
		}
	}
	return out
}

func markers(msgs []Message) []Message {
	var out []Message
	for _, m := range msgs {
		if m.Synthetic {
			out = append(out, m)
		}
	}
	return out
}

func TestSlidingWindowKeepsTheLastMessages(t *testing.T) {
	msgs := append([]Message{sys("You are helpful.")}, alternating(24, 20)...)
	msgs = numbered(msgs...)
	res := apply(t, SlidingWindow{WindowSize: 10, PreserveSystem: true}, msgs, 0)
	// The system message, then the last 10 and up to 5 before them: the
	// window begins where the content says (anchor).
	got := ids(res.Messages)
	start := got[1]
	want := append([]int{0}, rangeInts(start, 25)...)
	if diff := cmp.Diff(want, got); diff != "" || start < 10 || start > 15 {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	if res.Dropped != start-1 {
		t.Errorf("Dropped = %d, want %d", res.Dropped, start-1)
	}
}

// TestSlidingWindowStaysPut: as a conversation grows, the window's start
// moves every few messages, not with each one, and always keeps the last
// WindowSize.
func TestSlidingWindowStaysPut(t *testing.T) {
	all := numbered(append([]Message{sys("You are helpful.")}, alternating(200, 20)...)...)
	s := SlidingWindow{WindowSize: 10, PreserveSystem: true}
	moves, prev := 0, -1
	for n := 12; n <= len(all); n++ {
		got := realIDs(apply(t, s, all[:n], 0).Messages)
		start := got[1]
		if kept := n - start; kept < 10 || kept > 15 {
			t.Fatalf("%d messages: kept %d", n, kept)
		}
		if prev >= 0 && start != prev {
			moves++
		}
		prev = start
	}
	// Winnowing over 6 candidates moves about once every 3.5 messages;
	// a window of exactly the last 10 moves with each one.
	t.Logf("the start moved %d times in %d messages", moves, len(all)-12)
	if moves > (len(all)-12)/2 {
		t.Errorf("the start moved %d times in %d messages", moves, len(all)-12)
	}
}

func TestSlidingWindowKeepsSystemMessages(t *testing.T) {
	// 2 system messages (first and in the middle) and 20 others.
	others := alternating(20, 20)
	msgs := append([]Message{sys("first")}, others[:10]...)
	msgs = append(msgs, sys("second"))
	msgs = numbered(append(msgs, others[10:]...)...)
	res := apply(t, SlidingWindow{WindowSize: 5, PreserveSystem: true}, msgs, 0)
	want := append([]int{0, 11}, rangeInts(17, 22)...)
	if diff := cmp.Diff(want, realIDs(res.Messages)); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	// The window starts with an assistant message, so a user marker keeps
	// the first message after the system block a user message.
	if got := rolesOf(res.Messages); got != "system system [user] assistant user assistant user assistant" {
		t.Errorf("roles = %q", got)
	}
}

func TestSlidingWindowLeavesAShortConversation(t *testing.T) {
	msgs := alternating(5, 20)
	res := apply(t, SlidingWindow{WindowSize: 10}, msgs, 0)
	if &res.Messages[0] != &msgs[0] || len(res.Messages) != 5 || res.Notice != "" || res.Dropped != 0 {
		t.Errorf("got %v (notice %q), want the input unchanged", ids(res.Messages), res.Notice)
	}
}

// hundred returns a message of content size bytes costing exactly 100
// tokens with testCounter.
const hundred = (100 - 3) * 4

func TestTokenBudgetDropsOldestFirst(t *testing.T) {
	msgs := alternating(100, hundred) // 10000 tokens
	if got := Total(msgs, counter); got != 10000 {
		t.Fatalf("setup: %d tokens", got)
	}
	res := apply(t, TokenBudget{}, msgs, 5000)
	if got := Total(res.Messages, counter); got > 5000 {
		t.Errorf("total %d > 5000", got)
	}
	// Oldest removed first: what is left is the newest 50.
	if diff := cmp.Diff(rangeInts(50, 100), ids(res.Messages)); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
}

func TestTokenBudgetKeepsSystemMessages(t *testing.T) {
	msgs := numbered(append([]Message{sys(pad("rules ", (500-3)*4))}, alternating(100, hundred)...)...)
	res := apply(t, TokenBudget{}, msgs, 2000)
	got := ids(res.Messages)
	if got[0] != 0 {
		t.Fatalf("system message dropped: %v", got)
	}
	if total := Total(res.Messages, counter); total > 2000 {
		t.Errorf("total %d > 2000", total)
	}
	// The remaining 1500 tokens go to the newest messages: 15 would start
	// with an assistant message and need a marker (9 tokens) that does not
	// fit, so 14.
	if diff := cmp.Diff(append([]int{0}, rangeInts(87, 101)...), got); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
}

func TestTokenBudgetWarnsWhenSystemMessagesExceedIt(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	msgs := alternating(6, 40)
	msgs = numbered(append([]Message{sys(pad("a ", (1500-3)*4))}, append(msgs[:3], append([]Message{sys(pad("b ", (1500-3)*4))}, msgs[3:]...)...)...)...)
	res := apply(t, TokenBudget{Log: log}, msgs, 2000)
	if got := rolesOf(res.Messages); got != "system system" {
		t.Errorf("roles = %q, want only the system messages", got)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "system messages alone exceed") {
		t.Errorf("no warning logged: %q", logs.String())
	}
}

func TestSmartKeepsFirstAndLastMessages(t *testing.T) {
	msgs := alternating(50, 20)
	res := apply(t, Smart{PreserveFirst: 2, PreserveLast: 5}, msgs, 0)
	want := []int{0, 1, -1, 45, 46, 47, 48, 49}
	if diff := cmp.Diff(want, ids(res.Messages)); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	if m := res.Messages[2]; m.Content != "[43 messages omitted]" || m.Role != "user" {
		t.Errorf("marker = %s %q", m.Role, m.Content)
	}
}

func TestSmartLeavesASmallConversation(t *testing.T) {
	msgs := alternating(5, 20)
	res := apply(t, Smart{PreserveFirst: 2, PreserveLast: 5}, msgs, 0)
	if len(res.Messages) != 5 || len(markers(res.Messages)) != 0 || res.Notice != "" {
		t.Errorf("got %s, want the 5 messages and no marker", rolesOf(res.Messages))
	}
}

func TestSmartMarkerCountsOmittedMessages(t *testing.T) {
	res := apply(t, Smart{PreserveFirst: 2, PreserveLast: 5}, alternating(100, 20), 0)
	ms := markers(res.Messages)
	if len(ms) != 1 || ms[0].Content != "[93 messages omitted]" {
		t.Errorf("markers = %+v, want one with [93 messages omitted]", ms)
	}
}

func TestSelectiveKeepsPreservedRoles(t *testing.T) {
	msgs := numbered(
		sys("s"), user("u1"), call("a"), result("a", "r1"), asst("a1"),
		user("u2"), call("b"), result("b", "r2"), asst("a2"), user("u3"),
	)
	res := apply(t, Selective{}, msgs, 0)
	if diff := cmp.Diff([]int{0, 1, 5, 9}, realIDs(res.Messages)); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	if got := rolesOf(res.Messages); got != "system user [assistant] user [assistant] user" {
		t.Errorf("roles = %q", got)
	}
}

func TestSelectiveKeepsMarkedMessages(t *testing.T) {
	msgs := alternating(10, 20)
	msgs[3].Preserve = true
	msgs[6].Preserve = true
	res := apply(t, Selective{PreserveRoles: []string{}, PreserveMarked: true}, msgs, 0)
	// Marked ones kept; the others go, but for the newest user message and
	// the last message.
	if diff := cmp.Diff([]int{3, 6, 8, 9}, realIDs(res.Messages)); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	unmarked := apply(t, Selective{PreserveRoles: []string{}}, msgs, 0)
	if diff := cmp.Diff([]int{8, 9}, realIDs(unmarked.Messages)); diff != "" {
		t.Errorf("without PreserveMarked (-want +got):\n%s", diff)
	}
}

// spy records the strategies a Composite applies.
type spy struct {
	Strategy
	log *[]string
}

func (s spy) Apply(ctx context.Context, in Input) (Result, error) {
	*s.log = append(*s.log, s.Name())
	return s.Strategy.Apply(ctx, in)
}

func TestCompositeAppliesStrategiesInOrder(t *testing.T) {
	var calls []string
	msgs := alternating(50, hundred) // 5000 tokens; first 2 + last 5 are 700
	c := Composite{Strategies: []Strategy{
		spy{Smart{PreserveFirst: 2, PreserveLast: 5}, &calls},
		spy{TokenBudget{}, &calls},
	}}
	res := apply(t, c, msgs, 500)
	if diff := cmp.Diff([]string{"smart", "token_budget"}, calls); diff != "" {
		t.Errorf("applied (-want +got):\n%s", diff)
	}
	if got := Total(res.Messages, counter); got > 500 {
		t.Errorf("total %d > 500", got)
	}
}

func TestCompositeStopsOnceWithinTarget(t *testing.T) {
	var calls []string
	msgs := alternating(50, hundred)
	c := Composite{Strategies: []Strategy{
		spy{Smart{PreserveFirst: 2, PreserveLast: 5}, &calls},
		spy{TokenBudget{}, &calls},
	}}
	res := apply(t, c, msgs, 1000)
	if diff := cmp.Diff([]string{"smart"}, calls); diff != "" {
		t.Errorf("applied (-want +got):\n%s", diff)
	}
	if got := Total(res.Messages, counter); got > 1000 {
		t.Errorf("total %d > 1000", got)
	}
}

func lines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "line %04d\n", i) // 10 bytes
	}
	return b.String()
}

func TestToolResultsCutsALargeResult(t *testing.T) {
	m := result("a", lines(2000)) // 20000 bytes: 5000 tokens
	got := ToolResults{MaxTokens: 1000}.Compact(m, counter)
	n := counter.CountText(got.Content)
	if n > 1000 || n < 900 {
		t.Errorf("compacted to %d tokens, want about 1000", n)
	}
	if !strings.Contains(got.Content, "tokens cut …]") || !got.Edited {
		t.Errorf("no visible cut note or not Edited: %q…", got.Content[:40])
	}
	if !strings.HasPrefix(got.Content, "line 0000\n") || !strings.HasSuffix(got.Content, "line 1999\n") {
		t.Errorf("start or end of the result lost")
	}
}

func TestToolResultsLeavesASmallResult(t *testing.T) {
	m := result("a", lines(200)) // 500 tokens
	got := ToolResults{MaxTokens: 1000}.Compact(m, counter)
	if diff := cmp.Diff(m, got); diff != "" {
		t.Errorf("changed (-want +got):\n%s", diff)
	}
}

func TestToolResultsKeepsOtherFields(t *testing.T) {
	m := Message{Role: "tool", Content: lines(2000), Name: "grep", ToolCallID: "call_1", Raw: raw(7), Importance: 0.3, HasImportance: true}
	got := ToolResults{}.Compact(m, counter)
	if got.Content == m.Content {
		t.Fatal("content not compacted")
	}
	if diff := cmp.Diff(m, got, cmpopts.IgnoreFields(Message{}, "Content", "Edited", "Tokens")); diff != "" {
		t.Errorf("other fields changed (-want +got):\n%s", diff)
	}
}

func TestNewSmartIsSmartThenTokenBudget(t *testing.T) {
	s, err := strategyFor("smart", Config{})
	if err != nil {
		t.Fatal(err)
	}
	c, ok := s.(Composite)
	if !ok || len(c.Strategies) != 2 {
		t.Fatalf("strategyFor(smart) = %#v, want Composite{Smart, TokenBudget}", s)
	}
	if diff := cmp.Diff(Smart{Fill: true}, c.Strategies[0]); diff != "" {
		t.Errorf("first strategy (-want +got):\n%s", diff)
	}
}

func TestTrimmerTrimsAConversationOverThreshold(t *testing.T) {
	tr, err := NewTrimmer(Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := alternating(95, hundred) // 95% of 10000
	msgs = append(msgs, user(pad("big ", 1000*4)))
	res, err := tr.Trim(context.Background(), Request{}, msgs, 10000, counter)
	if err != nil {
		t.Fatal(err)
	}
	if res.Dropped == 0 || res.Notice == "" {
		t.Errorf("no truncation: dropped %d, notice %q", res.Dropped, res.Notice)
	}
	if got := Total(res.Messages, counter); got > 8000 {
		t.Errorf("total %d, want within 80%% of 10000", got)
	}
}

func TestTrimmerCutsOnlyAboveThreshold(t *testing.T) {
	tr, err := NewTrimmer(Config{Threshold: 0.9, Target: 0.6}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := alternating(92, hundred) // 92%
	res, err := tr.Trim(context.Background(), Request{}, msgs, 10000, counter)
	if err != nil {
		t.Fatal(err)
	}
	if got := Total(res.Messages, counter); got >= 9200 {
		t.Errorf("usage did not decrease: %d", got)
	}
	under, _ := tr.Trim(context.Background(), Request{}, msgs[:89], 10000, counter)
	if under.Notice != "" || len(under.Messages) != 89 {
		t.Errorf("compacted below the threshold: %q", under.Notice)
	}
}

func TestBudgetActsAt85Percent(t *testing.T) {
	if _, act := Budget(8500, 10000, DefaultThreshold, DefaultTarget); !act {
		t.Error("85% usage is not near the limit")
	}
}

func TestNewSlidingWindowMode(t *testing.T) {
	s, err := strategyFor("sliding_window", Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.(Composite).Strategies[0]; got != (SlidingWindow{PreserveSystem: true}) {
		t.Errorf("got %#v", got)
	}
}

func TestNewSmartModeFromConfig(t *testing.T) {
	s, err := strategyFor("", Config{Mode: "smart"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(Composite).Strategies[0].(Smart); !ok {
		t.Errorf("got %#v", s)
	}
}

// fakeSummarize stands in for the summarizing strategy of a later change.
type fakeSummarize struct{ None }

func (fakeSummarize) Name() string { return "summarize" }

func TestSummarizeModeNeedsASummarizer(t *testing.T) {
	// Without an LLM there is no summarize strategy: a clear error.
	if _, err := strategyFor("summarize", Config{}); !errors.Is(err, ErrUnknownMode) {
		t.Errorf("strategyFor(summarize) error = %v, want ErrUnknownMode", err)
	}
	// With one (the NewTrimmer hook), the mode is a Composite.
	tr, err := NewTrimmer(Config{Mode: "summarize"}, nil, fakeSummarize{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := tr.Strategy("")
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := s.(Composite); !ok || c.Strategies[0].Name() != "summarize" {
		t.Errorf("got %#v, want Composite{summarize, …}", s)
	}
}

func TestBudgetTriggersAt80Percent(t *testing.T) {
	if _, act := Budget(80000, 100000, DefaultThreshold, DefaultTarget); !act {
		t.Error("80000 of 100000 does not trigger trimming")
	}
	if _, act := Budget(79999, 100000, DefaultThreshold, DefaultTarget); act {
		t.Error("79999 of 100000 triggers trimming")
	}
}

func TestSmartKeepsFirst2AndLast10(t *testing.T) {
	msgs := alternating(20, 20)
	res := apply(t, Smart{PreserveFirst: 2, PreserveLast: 10}, msgs, 0)
	// Turns 1-2 and 11-20 (ids 0-1 and 10-19) kept, 3-10 discarded.
	if diff := cmp.Diff(append([]int{0, 1}, rangeInts(10, 20)...), realIDs(res.Messages)); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	// Eight messages dropped between an assistant and a user message: the
	// marker is a user/assistant pair, so the roles still alternate.
	ms := markers(res.Messages)
	if len(ms) != 2 || ms[0].Content != "[8 messages omitted]" || rolesOf(ms) != "[user] [assistant]" {
		t.Errorf("markers = %+v", ms)
	}
	if res.Dropped != 8 {
		t.Errorf("Dropped = %d, want 8", res.Dropped)
	}
}

func TestSmartKeepsSystemFirstAndRecentMessages(t *testing.T) {
	msgs := numbered(append([]Message{sys("metadata")}, alternating(20, 20)...)...)
	res := apply(t, Smart{PreserveFirst: 2, PreserveLast: 10}, msgs, 0)
	got := realIDs(res.Messages)
	for _, want := range []int{0, 1, 2, 11, 20} { // system, first, second, recent
		found := false
		for _, id := range got {
			found = found || id == want
		}
		if !found {
			t.Errorf("message %d dropped; kept %v", want, got)
		}
	}
}

func TestSmartNotice(t *testing.T) {
	res := apply(t, Smart{PreserveFirst: 2, PreserveLast: 10}, alternating(30, 20), 0)
	if want := "Context trimmed. Kept first 2 and last 10 messages."; res.Notice != want {
		t.Errorf("Notice = %q, want %q", res.Notice, want)
	}
}

func withImportance(m Message, v float64) Message {
	m.Importance, m.HasImportance = v, true
	return m
}

func TestImportanceKeepsSystemImportantAndRecent(t *testing.T) {
	msgs := alternating(30, 40)
	msgs[4] = withImportance(msgs[4], 0.9)
	msgs[6] = withImportance(msgs[6], 0.8) // not above 0.8
	msgs = numbered(append([]Message{sys("s")}, msgs...)...)
	res := apply(t, Importance{}, msgs, 0)
	want := append([]int{0, 5}, rangeInts(26, 31)...) // system, the 0.9 one, the last 5
	if diff := cmp.Diff(want, realIDs(res.Messages)); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
}

func TestImportanceDropsLeastImportantOldestFirst(t *testing.T) {
	msgs := alternating(12, hundred)
	msgs[2] = withImportance(msgs[2], 0.5)
	msgs[3] = withImportance(msgs[3], 0.5)
	msgs[4] = withImportance(msgs[4], 0.3)
	msgs[5] = withImportance(msgs[5], 0.3)
	for i := 0; i < 2; i++ {
		msgs[i] = withImportance(msgs[i], 0.7)
	}
	for i := 6; i < 12; i++ {
		msgs[i] = withImportance(msgs[i], 0.6)
	}
	// 1200 tokens; room for 10 messages: the two 0.3 ones go, though the
	// 0.5 ones are older.
	res := apply(t, Importance{}, msgs, 1000)
	if diff := cmp.Diff([]int{0, 1, 2, 3, 6, 7, 8, 9, 10, 11}, realIDs(res.Messages)); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	// Room for 9 (and the user marker that then goes between two
	// assistant messages): then the oldest of the 0.5 ones.
	res = apply(t, Importance{}, msgs, 910)
	if diff := cmp.Diff([]int{0, 1, 3, 6, 7, 8, 9, 10, 11}, realIDs(res.Messages)); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
}

// With max_tokens 100, an important message survives 20 unimportant ones,
// added one by one, and the context never exceeds max_tokens.
func TestImportanceModeKeepsAnImportantMessageWithinMaxTokens(t *testing.T) {
	tr, err := NewTrimmer(Config{Mode: "importance"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := numbered(withImportance(user("Important"), 1.0))
	for i := range 20 {
		msgs = append(msgs, withImportance(user(fmt.Sprintf("Message %d", i)), 0.5))
		msgs[len(msgs)-1].Raw = raw(len(msgs) - 1)
		res, err := tr.Trim(context.Background(), Request{}, msgs, 100, counter)
		if err != nil {
			t.Fatal(err)
		}
		if got := Total(res.Messages, counter); got > 100 {
			t.Fatalf("after %d messages: %d tokens > max_tokens 100", i+1, got)
		}
		if realIDs(res.Messages)[0] != 0 {
			t.Fatalf("after %d messages: important message dropped", i+1)
		}
	}
}
