package budget

import (
	"sync"

	"github.com/ctxproxy/ctxproxy/chat"
)

// WarnAt is the usage, a fraction of the effective limit, from which a
// conversation is near its limit (NearLimit): the capacity warning's 80%.
const WarnAt = 0.80

// MessageCounting counts what one message costs in a prompt, structure
// overhead included. A *MessageCounter does; so does every counter the
// strategies take (rewrite.Counter), so a Tracker and a strategy can share
// one.
type MessageCounting interface {
	CountMessage(m *chat.Message) int
}

// Tracker follows one conversation's token use against a model's limits.
// The running total is kept incrementally as turns are added (not
// recounted from scratch); each
// message's count is cached in its Tokens field. Beside its own count, it
// keeps the conversation's running totals as the proxy saw its requests
// (Record, Totals). A Tracker is safe for concurrent use.
type Tracker struct {
	counter MessageCounting
	limits  Window

	mu           sync.Mutex
	system       int
	conversation int
	messages     int
	tools        int
	totals       Totals
}

// NewTracker returns a tracker counting with c against l.
func NewTracker(c MessageCounting, l Window) *Tracker {
	return &Tracker{counter: c, limits: l}
}

// Limits returns the limits tracked against.
func (t *Tracker) Limits() Window { return t.limits }

// SetSystemPrompt counts the system prompt, records it in the budget and
// returns its tokens.
func (t *Tracker) SetSystemPrompt(prompt string) int {
	n := 0
	if prompt != "" {
		n = t.counter.CountMessage(&chat.Message{Role: "system", Content: prompt})
	}
	t.mu.Lock()
	t.system = n
	t.mu.Unlock()
	return n
}

// SetTools records the tokens of the tools definitions, as
// MessageCounter.Prompt counts them.
func (t *Tracker) SetTools(tokens int) {
	t.mu.Lock()
	t.tools = max(0, tokens)
	t.mu.Unlock()
}

// Update replaces the tracked conversation with msgs. Messages already
// counted (Tokens > 0) are not counted again.
func (t *Tracker) Update(msgs []chat.Message) {
	n := 0
	for i := range msgs {
		n += t.counter.CountMessage(&msgs[i])
	}
	t.mu.Lock()
	t.conversation, t.messages = n, len(msgs)
	t.mu.Unlock()
}

// Add appends turns to the conversation, counting only them, and returns
// the new total.
func (t *Tracker) Add(msgs ...*chat.Message) int {
	n := 0
	for _, m := range msgs {
		n += t.counter.CountMessage(m)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.conversation += n
	t.messages += len(msgs)
	return t.system + t.tools + t.conversation
}

// Reset forgets the conversation; the system prompt and tools stay.
func (t *Tracker) Reset() {
	t.mu.Lock()
	t.conversation, t.messages = 0, 0
	t.mu.Unlock()
}

// Messages returns the number of messages tracked.
func (t *Tracker) Messages() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.messages
}

// Tokens returns the tokens in use: system prompt, tools and conversation.
func (t *Tracker) Tokens() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.system + t.tools + t.conversation
}

// Budget returns the current allocation of the window.
func (t *Tracker) Budget() Budget {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Budget{
		Total:           t.limits.MaxTokens,
		SystemPrompt:    t.system,
		Tools:           t.tools,
		ResponseReserve: t.limits.MaxOutputTokens + t.limits.Reserved,
		Conversation:    t.conversation,
	}
}

// ExceedsLimit reports whether the tokens in use exceed the effective
// limit.
func (t *Tracker) ExceedsLimit() bool { return t.Overflow() > 0 }

// Overflow returns how many tokens over the effective limit the
// conversation is, 0 when within (limit 10000, usage 12000 → 2000).
func (t *Tracker) Overflow() int { return max(0, t.Tokens()-t.limits.Effective()) }

// Usage returns the tokens in use as a percentage of the effective limit
// (75000 of 100000 → 75.0); 100 or more when over, and 100 for
// a zero limit with anything in use.
func (t *Tracker) Usage() float64 {
	n, limit := t.Tokens(), t.limits.Effective()
	if limit <= 0 {
		if n > 0 {
			return 100
		}
		return 0
	}
	return 100 * float64(n) / float64(limit)
}

// NearLimit reports whether usage has reached WarnAt (80%) of the
// effective limit (85% is near).
func (t *Tracker) NearLimit() bool { return t.Usage() >= 100*WarnAt }
