package snapshots

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// Session is the state ctxproxy keeps for one session id: the conversation
// as last seen (the client's messages plus the assistant's reply), the
// numbers of the last request, metadata and cached summaries. The admin
// API's adminapi.SessionDetail shows it with counts in place of the
// messages, and without the summaries.
type Session struct {
	// ID is the client's session id, exactly as sent.
	ID    string `json:"session_id"`
	Model string `json:"model,omitempty"`
	// Backend is the server that answered its last turn, when ctxproxy
	// forwards to several: its next turn goes there while it can take
	// it, where the prompt is in the server's cache.
	Backend string `json:"backend,omitempty"`
	// Created and Updated are set by the store (UTC).
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// Metadata is the session's own metadata; Clear keeps it, as /clear
	// removes the turns, not what the session is.
	Metadata map[string]any `json:"metadata,omitempty"`
	Stats    Stats          `json:"stats"`
	// Summaries caches conversation summaries by the iterations they cover.
	Summaries []Summary `json:"summaries,omitempty"`
	// Messages is the conversation, oldest first.
	Messages []Message `json:"messages,omitempty"`
}

// Message is one stored chat message.
type Message struct {
	Role string `json:"role"`
	// Content is the message's text for display, counting and export: the
	// string content, or the text parts joined with "\n".
	Content   string    `json:"content"`
	Timestamp time.Time `json:"timestamp,omitzero"`
	// Importance is the message's importance in [0, 1]; nil when
	// the client gave none, which is not the same as 0.
	Importance *float64       `json:"importance,omitempty"`
	Metadata   map[string]any `json:"metadata,omitempty"`
	// Preserve is the client's "_preserve" pin: strategies keep the message.
	Preserve bool `json:"preserve,omitempty"`
	// Raw is the message object exactly as the client sent it (ctxproxy's
	// own annotation keys removed), kept byte for byte so that a stored
	// conversation replays exactly: images, tool calls and unknown keys
	// live only here. Nil for a message built from Role and Content.
	// Otherwise it must be a JSON object as a JSON decoder produced it:
	// stores refuse anything not in braces, but do not parse it again.
	Raw json.RawMessage `json:"raw,omitempty"`
}

// Stats are a session's numbers. Requests, Truncations and LastTruncation
// cover the whole session; the others describe the last request. The proxy
// fills them; Writer reads Usage for automatic snapshots. The admin API
// shows them as adminapi.SessionStats, a shape of its own: it writes every
// number where records leave out zeros, a missing truncation time as null,
// no OverflowRetries, and the budget with what it leaves.
type Stats struct {
	// Tokens is the prompt tokens of the conversation as the client sent
	// it, Limit the effective limit, Usage Tokens/Limit.
	Tokens int     `json:"tokens"`
	Limit  int     `json:"limit,omitempty"`
	Usage  float64 `json:"usage"`
	// Sent is the tokens forwarded after trimming; NumCtx the num_ctx set.
	Sent   int `json:"sent,omitempty"`
	NumCtx int `json:"num_ctx,omitempty"`
	// Dropped and Summarized are the messages removed or folded into
	// summaries before forwarding.
	Dropped    int `json:"dropped,omitempty"`
	Summarized int `json:"summarized,omitempty"`
	// PromptTokens and CompletionTokens are what the backend reported.
	PromptTokens     int `json:"prompt_tokens,omitempty"`
	CompletionTokens int `json:"completion_tokens,omitempty"`
	// AllPromptTokens and AllCompletionTokens add up the backend's
	// reports over every request.
	AllPromptTokens     int `json:"all_prompt_tokens,omitempty"`
	AllCompletionTokens int `json:"all_completion_tokens,omitempty"`
	Requests            int `json:"requests"`
	// Truncations counts responses where the backend cut the prompt itself
	// (reported prompt tokens far below what was sent).
	Truncations    int       `json:"truncations,omitempty"`
	LastTruncation time.Time `json:"last_truncation,omitzero"`
	// OverflowRetries counts resends after the backend refused a prompt
	// as longer than its window (ctxproxy cut it harder each time).
	OverflowRetries int `json:"overflow_retries,omitempty"`
	// PrefixKept is the share of the last forwarded prompt that the one
	// before began with; nil until two were forwarded.
	PrefixKept *float64 `json:"prefix_kept,omitempty"`
	// CachedTokens are the prompt tokens the backend reused from its
	// prompt cache on the last request, as it said; nil when it did not.
	CachedTokens *int `json:"cached_tokens,omitempty"`
	// Budget is how the last request's window was divided; nil when it
	// was not counted. Records written before Template was stored always
	// read with Template 0.
	Budget *adminapi.Budget `json:"budget,omitempty"`
}

// Summary is a cached summary of some iterations of a conversation, keyed
// by a hash of the messages it covers so it is reused while they stay.
type Summary struct {
	Key    string `json:"key"`
	Covers int    `json:"covers"`
	// Span is how many iterations, ending with iteration Covers-1, the
	// summary condenses; 0 means 1.
	Span    int       `json:"span,omitempty"`
	Text    string    `json:"text"`
	Tokens  int       `json:"tokens"`
	Created time.Time `json:"created"`
}

// Listing is a session's entry in the store's index, stored with each
// session record: the row the admin API lists (adminapi.SessionRow), and
// what the session takes in the store.
type Listing struct {
	adminapi.SessionRow
	// Bytes is what the session takes in the store, its log and its
	// snapshots, as stored; Retention.MaxBytes counts it. Filled by List.
	Bytes int64 `json:"bytes,omitempty"`
}

// Info summarizes s for a listing. Snapshots is left for the store to fill.
func (s *Session) Info() Listing {
	return Listing{SessionRow: adminapi.SessionRow{
		SessionID: s.ID,
		Model:     s.Model,
		Created:   s.Created,
		Updated:   s.Updated,
		Messages:  len(s.Messages),
		Tokens:    s.Stats.Tokens,
		Limit:     s.Stats.Limit,
		Usage:     finite(s.Stats.Usage),
		Sent:      s.Stats.Sent,
		Requests:  s.Stats.Requests,
		Backend:   s.Backend,
	}}
}

// Clone returns a copy of s that shares no slice or map with it (message
// Raw bytes and metadata values are shared: they are never changed in
// place).
func (s *Session) Clone() *Session {
	c := *s
	c.Messages = slices.Clone(s.Messages)
	for i := range c.Messages {
		c.Messages[i].Metadata = maps.Clone(c.Messages[i].Metadata)
	}
	c.Metadata = maps.Clone(s.Metadata)
	c.Summaries = slices.Clone(s.Summaries)
	return &c
}

// clear empties s the way /clear does: the turns and the numbers go, the
// session's identity and metadata stay.
func (s *Session) clear() {
	s.Messages = nil
	s.Summaries = nil
	s.Stats = Stats{}
}

// SetMessages records msgs as the conversation as last seen, for a client
// that sends its whole history each time. A message that is the same as
// the stored one at the same position (same raw bytes, or same role and
// content when either has no raw) keeps its timestamp, and its importance
// and metadata unless msgs sets them; the rest are stamped with now.
//
// The session takes msgs over and stamps them in place (a turn of a long
// conversation is not copied once more; a message found the same takes
// the stored copy of its raw bytes): the caller must not use them
// afterwards. Running it again on the same msgs gives the same result.
func (s *Session) SetMessages(msgs []Message, now time.Time) {
	now = now.UTC()
	for i := range msgs {
		m := &msgs[i]
		if i < len(s.Messages) && same(&s.Messages[i], m) {
			old := &s.Messages[i]
			if m.Raw != nil && old.Raw != nil {
				// The same bytes (same compared them): the stored
				// copy's, so that encoding the change finds them
				// equal by address instead of comparing them again.
				m.Raw = old.Raw
			}
			if m.Timestamp.IsZero() {
				m.Timestamp = old.Timestamp
			}
			if m.Importance == nil {
				m.Importance = old.Importance
			}
			if m.Metadata == nil {
				m.Metadata = old.Metadata
			}
		}
		if m.Timestamp.IsZero() {
			m.Timestamp = now
		}
	}
	s.Messages = msgs
}

// same reports whether a and b are the same message of a conversation.
func same(a, b *Message) bool {
	if a.Raw != nil && b.Raw != nil {
		return bytes.Equal(a.Raw, b.Raw)
	}
	return a.Role == b.Role && a.Content == b.Content
}

// Accumulate returns the messages to forward for a client that sends only
// its new turn: the stored conversation, oldest first, followed by sent.
// When sent begins with system messages they replace the stored leading
// system messages, so a client that sends its system prompt with every
// turn does not pile up copies of it. s may be nil (no session yet).
func Accumulate(s *Session, sent []Message) []Message {
	if s == nil || len(s.Messages) == 0 {
		return slices.Clone(sent)
	}
	history := s.Messages
	if systemPrefix(sent) > 0 {
		history = history[systemPrefix(history):]
		out := make([]Message, 0, len(sent)+len(history))
		out = append(out, sent[:systemPrefix(sent)]...)
		out = append(out, history...)
		return append(out, sent[systemPrefix(sent):]...)
	}
	out := make([]Message, 0, len(history)+len(sent))
	out = append(out, history...)
	return append(out, sent...)
}

// AppendTurn adds one accumulated turn to s after the response: the
// messages the client sent (with the system rule of Accumulate) and the
// assistant's reply. Messages without a timestamp get now. A nil reply (the
// request failed) appends nothing, so a failed turn is not remembered half.
func (s *Session) AppendTurn(sent []Message, reply *Message, now time.Time) {
	if reply == nil {
		return
	}
	now = now.UTC()
	msgs := Accumulate(s, sent)
	msgs = append(msgs, *reply)
	for i := range msgs {
		if msgs[i].Timestamp.IsZero() {
			msgs[i].Timestamp = now
		}
	}
	s.Messages = msgs
}

// systemPrefix returns how many messages at the start of msgs are system
// messages.
func systemPrefix(msgs []Message) int {
	n := 0
	for n < len(msgs) && msgs[n].Role == "system" {
		n++
	}
	return n
}
