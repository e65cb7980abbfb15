// Package chat holds the dialect-neutral chat message that ctxproxy
// decodes requests into: what counting (budget) measures and what the
// strategies (rewrite) choose from. It is a leaf, so that counting need not
// know the strategies to count their messages.
package chat

import "encoding/json"

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
	// assistant message before them (see rewrite.Units).
	ToolCallID string
	// Images are the images attached (Ollama "images", OpenAI
	// "image_url" parts, Responses "input_image", Anthropic "image"), in
	// order, each with its size where ctxproxy could read it.
	Images []Image

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

// Image is what ctxproxy reads of an attached image: its size in pixels,
// from the image's header. Both are zero when the size could not be read
// (a remote URL, a format ctxproxy does not parse, damaged data).
type Image struct {
	Width, Height int
}

// Known reports whether the image's size was read.
func (i Image) Known() bool { return i.Width > 0 && i.Height > 0 }

// ToolCall is one function call requested by an assistant message.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is the arguments as JSON text (OpenAI sends a string of
	// JSON, Ollama an object; both end up here as JSON text).
	Arguments string
}
