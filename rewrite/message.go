// Package rewrite holds ctxproxy's dialect-neutral view of a chat
// conversation and the strategies that cut it down to a token target:
// sliding window, token budget, smart, selective, importance, tool-result
// compaction, summarization and their composition.
//
// It knows nothing of HTTP, files or GPUs. The proxy decodes a request into
// []Message (keeping each message's raw JSON), a Strategy returns the
// messages to forward, and the proxy encodes them back, touching only what a
// strategy changed.
package rewrite

import (
	"context"
	"encoding/json"
)

// Message is one chat message in a dialect-neutral form.
//
// The fields other than Raw are what ctxproxy needs to count, group and
// choose messages. Raw is the message object exactly as the client sent it
// (with ctxproxy's own annotation keys removed); the proxy forwards Raw
// unchanged unless Edited is set. A message ctxproxy creates itself (a
// marker, a summary) has a nil Raw and is encoded from Role and Content.
type Message struct {
	Role string
	// Content is the countable text: the string content, or the text of
	// every text part of a parts array joined with "\n".
	Content string
	// Name is the optional participant name (OpenAI "name").
	Name string
	// ToolCalls are the calls an assistant message makes.
	ToolCalls []ToolCall
	// ToolCallID links a "tool" message to the call it answers (OpenAI).
	// Ollama tool messages carry none; they answer the calls of the
	// assistant message before them (see Units).
	ToolCallID string
	// Images is the number of images attached (Ollama "images", OpenAI
	// "image_url" parts).
	Images int

	// Preserve is the client's "_preserve" annotation: keep this message.
	Preserve bool
	// Importance is the client's "_importance" annotation in [0, 1]; it is
	// meaningful only when HasImportance is set.
	Importance    float64
	HasImportance bool

	// Raw is the JSON object as sent, annotations removed; nil for a
	// message ctxproxy made.
	Raw json.RawMessage
	// Edited reports that a strategy changed Content (for example cut the
	// middle out of a long tool result); the encoder then writes Content
	// back into Raw and keeps every other key.
	Edited bool
	// Synthetic marks a message ctxproxy inserted (a marker or a summary).
	Synthetic bool

	// Tokens caches what the message costs in a prompt, structure overhead
	// included; 0 means not counted yet. Counters fill it.
	Tokens int
}

// ToolCall is one function call requested by an assistant message.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is the arguments as JSON text (OpenAI sends a string of
	// JSON, Ollama an object; both end up here as JSON text).
	Arguments string
}

// Counter counts tokens for the strategies. budget provides the
// implementation; strategies depend only on this.
type Counter interface {
	// CountMessage returns the tokens m costs in a prompt, per-message
	// structure overhead included.
	CountMessage(m *Message) int
	// CountText returns the tokens of plain text.
	CountText(s string) int
}

// Strategy cuts a conversation down to at most target tokens (as counted
// by c). It must keep tool units whole, keep leading system messages and the
// newest user turn, and keep the order of what it keeps.
type Strategy interface {
	Name() string
	Apply(ctx context.Context, msgs []Message, target int, c Counter) (Result, error)
}

// Result is what a Strategy produced.
type Result struct {
	Messages []Message
	// Dropped is the number of input messages that are not in Messages.
	Dropped int
	// Summarized is the number of input messages folded into summaries.
	Summarized int
	// Notice says what was done, for the X-Ctxproxy-Notice header and the
	// log ("Context trimmed. Kept first 2 and last 10 turns.").
	Notice string
}
