// Package rewrite holds ctxproxy's dialect-neutral view of a chat
// conversation and the strategies that cut it down to a token target:
// sliding window, token budget, smart, selective, importance, tool-result
// compaction, summarization and their composition.
//
// It knows nothing of HTTP, files or GPUs. The proxy decodes a request into
// []Message (keeping each message's raw JSON), a Strategy returns the
// messages to forward, and the proxy encodes them back, touching only what a
// strategy changed.
//
// What a strategy may need to know of the chat request besides its
// messages — the session, the model, the client's credential for the
// summarizer, num_ctx, and what the client asked of the cut (the
// X-Ctxproxy-* headers, a compress's options) — is a Request: an argument
// of Trimmer.Trim, which hands it, with the effective limit, to every
// strategy in its Input. A context carries only cancellation and
// deadlines.
package rewrite

import (
	"context"

	"github.com/ctxproxy/ctxproxy/chat"
)

// Message is one chat message in a dialect-neutral form; it is declared
// in the leaf package chat, so that counting does not import the
// strategies.
type Message = chat.Message

// ToolCall is one function call requested by an assistant message.
type ToolCall = chat.ToolCall

// Counter counts tokens for the strategies. budget provides the
// implementation; strategies depend only on this.
type Counter interface {
	// CountMessage returns the tokens m costs in a prompt, per-message
	// structure overhead included.
	CountMessage(m *Message) int
	// CountText returns the tokens of plain text.
	CountText(s string) int
}

// Strategy cuts a conversation (in.Messages) down to at most in.Target
// tokens, as in.Counter counts. It must keep tool units whole, keep
// leading system messages and the newest user turn, and keep the order of
// what it keeps. Everything it may depend on is in its Input, the chat
// request included (in.Request); ctx carries only cancellation.
type Strategy interface {
	Name() string
	Apply(ctx context.Context, in Input) (Result, error)
}

// Result is what a Strategy produced.
type Result struct {
	Messages []Message
	// Dropped is the number of input messages that are not in Messages.
	Dropped int
	// Summarized is the number of input messages folded into summaries.
	Summarized int
	// Notice says what was done, for the X-Ctxproxy-Notice header and the
	// log ("Context trimmed. Kept first 2 and last 10 messages.").
	Notice string
}
