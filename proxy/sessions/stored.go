package sessions

import (
	"encoding/json"
	"fmt"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// Messages as the session store keeps them, and back.

// ToStored converts messages for the session store, keeping raw bytes.
func ToStored(msgs []rewrite.Message) []snapshots.Message {
	// Room for the reply a turn appends (record), so the list is not
	// copied again for it.
	out := make([]snapshots.Message, len(msgs), len(msgs)+1)
	for i, m := range msgs {
		sm := snapshots.Message{Role: m.Role, Content: m.Content, Raw: m.Raw, Preserve: m.Preserve}
		if m.Edited || m.Raw == nil {
			sm.Raw = nil
			if enc, err := wire.EncodeMessage(&msgs[i]); err == nil {
				sm.Raw = enc
			}
		}
		if m.HasImportance {
			imp := m.Importance
			sm.Importance = &imp
		}
		out[i] = sm
	}
	return out
}

// FromStored converts stored messages back, decoding their raw bytes.
func FromStored(msgs []snapshots.Message) ([]rewrite.Message, error) {
	out := make([]rewrite.Message, len(msgs))
	for i, sm := range msgs {
		raw := sm.Raw
		if raw == nil {
			b, err := json.Marshal(struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			}{sm.Role, sm.Content})
			if err != nil {
				return nil, err
			}
			raw = b
		}
		// The store keeps raw bytes as they were sent; check them before
		// scanning, as wire.Decode checks a request body.
		if _, err := jsonscan.Valid(raw); err != nil {
			return nil, fmt.Errorf("stored message %d: %w", i, err)
		}
		m, _, err := wire.DecodeMessage(raw)
		if err != nil {
			return nil, fmt.Errorf("stored message %d: %w", i, err)
		}
		if sm.Importance != nil {
			m.Importance, m.HasImportance = *sm.Importance, true
		}
		m.Preserve = m.Preserve || sm.Preserve
		out[i] = m
	}
	return out, nil
}

// ReplyMessage is the assistant's reply as a message the client would
// send back in its next request, in the request's dialect; for the
// conversation dialects in Ollama's chat shape, as StoredMessages keeps
// their messages.
func ReplyMessage(d wire.Dialect, rep wire.Reply) snapshots.Message {
	sm := snapshots.Message{Role: "assistant", Content: rep.Content}
	if d == wire.Responses || d == wire.Messages {
		sm.Metadata = map[string]any{"dialect": d.String()}
	}
	if raw, ok := plainReply(rep); ok {
		sm.Raw = raw
		return sm
	}
	m := map[string]any{"role": "assistant", "content": rep.Content}
	if len(rep.ToolCalls) > 0 {
		calls := make([]any, 0, len(rep.ToolCalls))
		for _, tc := range rep.ToolCalls {
			if d == wire.OpenAI {
				calls = append(calls, map[string]any{"id": tc.ID, "type": "function",
					"function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}})
				continue
			}
			var args any = map[string]any{}
			if tc.Arguments != "" {
				_ = json.Unmarshal([]byte(tc.Arguments), &args)
			}
			fn := map[string]any{"name": tc.Name, "arguments": args}
			call := map[string]any{"function": fn}
			if tc.ID != "" {
				call["id"] = tc.ID
			}
			calls = append(calls, call)
		}
		m["tool_calls"] = calls
	}
	if rep.Thinking != "" && d != wire.OpenAI {
		m["thinking"] = rep.Thinking
	}
	sm.Raw, _ = json.Marshal(m)
	return sm
}

// plainReply is the raw message of a reply that is text alone, the bytes
// json.Marshal gives its map (keys sorted, <, > and & escaped) without the
// map and the reflection: a turn of every chat stores one.
func plainReply(rep wire.Reply) (raw []byte, ok bool) {
	if len(rep.ToolCalls) > 0 || rep.Thinking != "" {
		return nil, false
	}
	const head, tail = `{"content":`, `,"role":"assistant"}`
	raw = make([]byte, 0, len(head)+len(rep.Content)+len(tail)+8)
	raw = jsonscan.AppendStringHTML(append(raw, head...), rep.Content)
	return append(raw, tail...), true
}

// StoredMessages converts what a session records. The conversation
// dialects' messages are stored as Ollama chat messages (role, content,
// tool_calls, tool_call_id), with the dialect in the metadata: the
// session's export, compress and restore read every session alike.
func StoredMessages(d wire.Dialect, msgs []rewrite.Message) []snapshots.Message {
	if d != wire.Responses && d != wire.Messages {
		return ToStored(msgs)
	}
	out := ToStored(chatShaped(msgs))
	for i := range out {
		out[i].Metadata = map[string]any{"dialect": d.String()}
	}
	return out
}

// chatShaped returns msgs with Raw in Ollama's chat shape.
func chatShaped(msgs []rewrite.Message) []rewrite.Message {
	out := make([]rewrite.Message, len(msgs))
	for i, m := range msgs {
		m.Edited = false
		if m.Raw != nil {
			m.Raw = chatMessage(&m)
		}
		out[i] = m
	}
	return out
}

func chatMessage(m *rewrite.Message) json.RawMessage {
	out := append([]byte(`{"role":`), jsonscan.AppendString(nil, m.Role)...)
	out = append(out, `,"content":`...)
	out = jsonscan.AppendString(out, m.Content)
	if len(m.ToolCalls) > 0 {
		out = append(out, `,"tool_calls":[`...)
		for i, tc := range m.ToolCalls {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, `{"id":`...)
			out = jsonscan.AppendString(out, tc.ID)
			out = append(out, `,"function":{"name":`...)
			out = jsonscan.AppendString(out, tc.Name)
			out = append(out, `,"arguments":`...)
			args := []byte(tc.Arguments)
			if v, err := jsonscan.Valid(args); err != nil || jsonscan.KindOf(v) != jsonscan.KindObject {
				args = []byte("{}")
			}
			out = append(out, args...)
			out = append(out, "}}"...)
		}
		out = append(out, ']')
	}
	if m.ToolCallID != "" {
		out = append(out, `,"tool_call_id":`...)
		out = jsonscan.AppendString(out, m.ToolCallID)
	}
	return append(out, '}')
}
