package proxy

import (
	"encoding/json"
	"fmt"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// Messages as the session store keeps them, and back.

// toStored converts messages for the session store, keeping raw bytes.
func toStored(msgs []rewrite.Message) []snapshots.Message {
	// Room for the reply a turn appends (record), so the list is not
	// copied again for it.
	out := make([]snapshots.Message, len(msgs), len(msgs)+1)
	for i, m := range msgs {
		sm := snapshots.Message{Role: m.Role, Content: m.Content, Raw: m.Raw, Preserve: m.Preserve}
		if m.Edited || m.Raw == nil {
			sm.Raw = nil
			if enc, err := encodeMessage(&msgs[i]); err == nil {
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

// fromStored converts stored messages back, decoding their raw bytes.
func fromStored(msgs []snapshots.Message) ([]rewrite.Message, error) {
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
		// scanning, as decodeChat checks a request body.
		if _, err := jsonscan.Valid(raw); err != nil {
			return nil, fmt.Errorf("stored message %d: %w", i, err)
		}
		m, _, err := decodeMessage(raw)
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

// replyMessage is the assistant's reply as a message the client would
// send back in its next request, in the request's dialect; for the
// conversation dialects in Ollama's chat shape, as storedMessages keeps
// their messages.
func replyMessage(d Dialect, rep reply) snapshots.Message {
	sm := snapshots.Message{Role: "assistant", Content: rep.content}
	if d == Responses || d == Messages {
		sm.Metadata = map[string]any{"dialect": d.String()}
	}
	if raw, ok := plainReply(rep); ok {
		sm.Raw = raw
		return sm
	}
	m := map[string]any{"role": "assistant", "content": rep.content}
	if len(rep.toolCalls) > 0 {
		calls := make([]any, 0, len(rep.toolCalls))
		for _, tc := range rep.toolCalls {
			if d == OpenAI {
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
	if rep.thinking != "" && d != OpenAI {
		m["thinking"] = rep.thinking
	}
	sm.Raw, _ = json.Marshal(m)
	return sm
}

// plainReply is the raw message of a reply that is text alone, the bytes
// json.Marshal gives its map (keys sorted, <, > and & escaped) without the
// map and the reflection: a turn of every chat stores one.
func plainReply(rep reply) (raw []byte, ok bool) {
	if len(rep.toolCalls) > 0 || rep.thinking != "" {
		return nil, false
	}
	const head, tail = `{"content":`, `,"role":"assistant"}`
	raw = make([]byte, 0, len(head)+len(rep.content)+len(tail)+8)
	raw = jsonscan.AppendStringHTML(append(raw, head...), rep.content)
	return append(raw, tail...), true
}
