package wire

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
	"github.com/ctxproxy/ctxproxy/proxy/translate"
)

// resolveConversation returns a Responses or Messages body with the names
// of its top level, and of each item of its conversation, resolved by
// rules (resolveNames); body itself when none needed it. The decoders of
// package translate then read exact names.
func resolveConversation(d Dialect, body []byte, ms []Member, rules KeyRules) ([]byte, error) {
	resolved, err := resolveNames(body, ms, requestFields(d), rules)
	if err != nil {
		return nil, err
	}
	if resolved != nil {
		body = resolved
		if ms, err = Members(body); err != nil {
			return nil, err
		}
	}
	list := "messages"
	if d == Responses {
		list = "input"
	}
	m, ok := FindMember(ms, list)
	if !ok || body[m.ValueStart] != '[' {
		return body, nil
	}
	arr := body[m.ValueStart:m.End]
	var items [][]byte
	changed := false
	err = jsonscan.Elements(arr, func(_ int, item []byte) error {
		if jsonscan.KindOf(item) == jsonscan.KindObject {
			ims, err := Members(item)
			if err != nil {
				return err
			}
			fixed, err := resolveNames(item, ims, messageFields(d), rules)
			if err != nil {
				return err
			}
			if fixed != nil {
				item, changed = fixed, true
			}
		}
		items = append(items, item)
		return nil
	})
	if err != nil || !changed {
		return body, err
	}
	out := append([]byte{'['}, bytes.Join(items, []byte{','})...)
	return ReplaceValue(body, m, append(out, ']')), nil
}

// decodeConversation reads a Responses or Messages request: the
// conversation from package translate, and the few top-level members
// that shape the prompt (think, reasoning, thinking, options) or name
// state the backend keeps.
func decodeConversation(d Dialect, body []byte) (*Request, error) {
	var conv *translate.Conversation
	var err error
	if d == Responses {
		conv, err = translate.DecodeResponses(body)
	} else {
		conv, err = translate.DecodeMessages(body)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotChat, err)
	}
	req := &Request{Dialect: d, Body: body, Model: conv.Model, Stream: conv.Stream, Messages: conv.Messages,
		Annotated: conv.Annotated, Tools: conv.Tools, MaxOutput: conv.MaxOutput,
		FirstSystem: conv.FirstSystem, FirstUser: conv.FirstUser, Conv: conv}
	ms, err := Members(body) // DecodeResponses / DecodeMessages validated it
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotChat, err)
	}
	for _, m := range ms {
		v := body[m.ValueStart:m.End]
		if bytes.Equal(v, []byte("null")) {
			continue
		}
		switch m.Key {
		case "options":
			maxOut := req.MaxOutput
			req.decodeOptions(v)
			if maxOut > 0 {
				req.MaxOutput = maxOut
			}
		case "think":
			req.Think = v
		case "reasoning": // Responses: {"effort": …}
			var r struct {
				Effort string `json:"effort"`
			}
			if json.Unmarshal(v, &r) == nil {
				req.Effort = r.Effort
			}
		case "thinking", "output_config": // Messages, mapped as the translation maps them
			if d == Messages && req.Think == nil {
				f := func(key string) []byte {
					if m, ok := FindMember(ms, key); ok {
						return body[m.ValueStart:m.End]
					}
					return nil
				}
				if think, err := translate.AnthropicThink(f("thinking"), f("output_config"), ""); err == nil && think != nil {
					req.Think = think
				}
			}
		case "prompt_cache_key", "metadata":
			if cs := ClientSessionOf(m.Key, v); cs != "" {
				req.ClientSession = cs
			}
		case "conversation", "prompt":
			if d == Responses {
				req.ServerState = m.Key
			}
		}
	}
	if conv.PreviousResponseID != "" {
		req.ServerState = "previous_response_id"
	}
	if d == Responses && req.ServerState == "" {
		for _, msg := range req.Messages {
			if isItemReference(msg.Raw) {
				req.ServerState = "item_reference"
				break
			}
		}
	}
	return req, nil
}

// isItemReference reports whether raw is a Responses item_reference item.
func isItemReference(raw []byte) bool {
	if len(raw) == 0 || raw[0] != '{' || !bytes.Contains(raw, []byte("item_reference")) {
		return false
	}
	ms, err := Members(raw)
	if err != nil {
		return false
	}
	t, ok := FindMember(ms, "type")
	return ok && string(raw[t.ValueStart:t.End]) == `"item_reference"`
}
