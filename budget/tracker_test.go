package budget

import (
	"testing"

	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/chat"
)

// A model's tracker has its limits and its encoding's counter.
func TestRegistryTrackerForModel(t *testing.T) {
	r := NewRegistry(Config{}, nil)
	tr := r.Tracker("gpt-4")
	if got, want := tr.Limits(), (Window{MaxTokens: 8192, MaxOutputTokens: 4096}); got != want {
		t.Errorf("Limits() = %+v, want %+v", got, want)
	}
	if got, want := tr.counter.(*MessageCounter).Name(), tokenizer.EncodingCL100K; got != want {
		t.Errorf("counter encoding = %q, want %q", got, want)
	}
}

// The system prompt is counted with its message structure and budgeted.
func TestTrackerSetSystemPrompt(t *testing.T) {
	tr := NewTracker(newCL100K(t), Window{MaxTokens: 100000})
	n := tr.SetSystemPrompt("You are a helpful assistant.")
	if want := 3 + 1 + 6; n != want { // structure, role, 6 tokens of text
		t.Errorf("SetSystemPrompt = %d, want %d", n, want)
	}
	if got := tr.Budget().SystemPrompt; got != n {
		t.Errorf("Budget().SystemPrompt = %d, want %d", got, n)
	}
	if got := tr.Tokens(); got != n {
		t.Errorf("Tokens() = %d, want %d", got, n)
	}
}

// messagesOf returns n messages already counted at tokens each.
func messagesOf(n, tokens int) []chat.Message {
	msgs := make([]chat.Message, n)
	for i := range msgs {
		msgs[i] = chat.Message{Role: "user", Content: "x", Tokens: tokens}
	}
	return msgs
}

// Update replaces the conversation: 10 messages of 500 tokens, then 2.
func TestTrackerUpdateReplacesTheConversation(t *testing.T) {
	tr := NewTracker(newCL100K(t), Window{MaxTokens: 100000})
	tr.Update(messagesOf(10, 500))
	if got, want := tr.Tokens(), 5000; got != want {
		t.Errorf("Tokens() = %d, want %d", got, want)
	}
	if got, want := tr.Budget().Conversation, 5000; got != want {
		t.Errorf("Budget().Conversation = %d, want %d", got, want)
	}
	tr.Update(messagesOf(2, 500))
	if got, want := tr.Tokens(), 1000; got != want {
		t.Errorf("after a second Update: Tokens() = %d, want %d", got, want)
	}
}

// 12000 tokens against a limit of 10000 overflow by 2000.
func TestTrackerOverflow(t *testing.T) {
	tr := NewTracker(newCL100K(t), Window{MaxTokens: 10000})
	tr.Update(messagesOf(3, 4000))
	if !tr.ExceedsLimit() {
		t.Errorf("ExceedsLimit() = false at 12000 of 10000")
	}
	if got, want := tr.Overflow(), 2000; got != want {
		t.Errorf("Overflow() = %d, want %d", got, want)
	}
}

// 75000 of 100000 tokens is 75% and no overflow.
func TestTrackerUsagePercentage(t *testing.T) {
	tr := NewTracker(newCL100K(t), Window{MaxTokens: 100000})
	tr.Update(messagesOf(3, 25000))
	if got, want := tr.Usage(), 75.0; got != want {
		t.Errorf("Usage() = %v, want %v", got, want)
	}
	if tr.ExceedsLimit() || tr.Overflow() != 0 {
		t.Errorf("within limit but ExceedsLimit %v, Overflow %d", tr.ExceedsLimit(), tr.Overflow())
	}
}

// From 80% of the limit (85% included) the tracker is near it.
func TestTrackerNearLimitFrom80Percent(t *testing.T) {
	tests := []struct {
		tokens int
		want   bool
	}{{85000, true}, {80000, true}, {79999, false}, {0, false}}
	for _, tt := range tests {
		tr := NewTracker(newCL100K(t), Window{MaxTokens: 100000})
		if tt.tokens > 0 {
			tr.Update(messagesOf(1, tt.tokens))
		}
		if got := tr.NearLimit(); got != tt.want {
			t.Errorf("at %d of 100000: NearLimit() = %v, want %v", tt.tokens, got, tt.want)
		}
	}
}

// The running total is kept as turns are added, counting only the new
// turn.
func TestTrackerCountsOnlyTheNewTurn(t *testing.T) {
	inner := &countingCounter{Counter: mustTiktoken(t, tokenizer.EncodingCL100K)}
	mc := NewMessageCounter(inner, 0) // no cache: every count reaches inner
	tr := NewTracker(mc, Window{MaxTokens: 8192})
	turns := []string{"Hello", "Hi there! How can I help?", "Tell me a joke.", "Why did the chicken cross the road?"}
	want := 0
	for i, s := range turns {
		m := &chat.Message{Role: "user", Content: s}
		calls := inner.calls()
		got := tr.Add(m)
		want += m.Tokens
		if got != want || tr.Tokens() != want {
			t.Errorf("turn %d: total %d, Tokens() %d, want %d", i, got, tr.Tokens(), want)
		}
		if n := inner.calls() - calls; n != 1 {
			t.Errorf("turn %d: counted %d texts, want only the new turn's", i, n)
		}
	}
	if got := tr.Messages(); got != len(turns) {
		t.Errorf("Messages() = %d, want %d", got, len(turns))
	}
	tr.Reset()
	if tr.Tokens() != 0 || tr.Messages() != 0 {
		t.Errorf("after Reset: Tokens %d, Messages %d", tr.Tokens(), tr.Messages())
	}
}

func TestTrackerZeroLimit(t *testing.T) {
	tr := NewTracker(newCL100K(t), Window{})
	if tr.Usage() != 0 {
		t.Errorf("empty: Usage() = %v", tr.Usage())
	}
	tr.Add(&chat.Message{Role: "user", Content: "hi"})
	if tr.Usage() != 100 || !tr.ExceedsLimit() {
		t.Errorf("zero limit: Usage() = %v, ExceedsLimit() = %v", tr.Usage(), tr.ExceedsLimit())
	}
	tr.SetTools(-5)
	if got := tr.Budget().Tools; got != 0 {
		t.Errorf("negative tools recorded as %d", got)
	}
}
