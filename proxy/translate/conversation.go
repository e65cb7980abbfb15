package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// Conversation is a Responses or Messages request seen as the chat that
// ctxproxy manages: the messages its strategies count, trim and
// summarize, in rewrite's dialect-neutral form, and the original body, so
// that Encode can write back only what changed (docs/how-it-works.md). It
// plays the part wire.Request plays for the two chat routes.
//
// One chat.Message stands for:
//
//   - the system prompt (Responses "instructions", Messages "system"), as a
//     leading system message; Encode writes it back to its field;
//   - each Responses input item, with the reasoning items before an item
//     grouped with it (Raw is then a JSON array of the items), because
//     OpenAI refuses a reasoning item without the item that follows it;
//     a function_call is an assistant message with one tool call, a
//     function_call_output a tool message with its call_id, so rewrite's
//     units keep each call with its output;
//   - each Anthropic message; a user message that carries tool_result
//     blocks is a tool message answering the tool_use blocks of the
//     assistant message before it (ToolCallID is its first tool_use_id),
//     so the pair is one unit.
type Conversation struct {
	Model string
	// Stream is the client's stream flag (both dialects default to false).
	Stream bool
	// MaxOutput is max_output_tokens or max_tokens, 0 when unset.
	MaxOutput int
	Messages  []chat.Message
	// Tools are the request's function tools in Ollama's shape, as the
	// chat template renders them, for counting; nil when none.
	Tools json.RawMessage
	// Annotated reports that some message carried ctxproxy's _preserve or
	// _importance keys: the body must be encoded again without them.
	Annotated bool
	// PreviousResponseID is a Responses request's previous_response_id:
	// the conversation continues one kept by the backend, which ctxproxy
	// cannot see or count. Trim nothing then; to Ollama the request is
	// refused (see ResponsesRequest).
	PreviousResponseID string
	// Compaction reports that a Responses input holds the items of
	// Ollama's own compaction (0.34: "compaction", which only it can
	// expand, or "compaction_trigger", which asks it to compact): such a
	// request is left to Ollama's own /v1/responses.
	Compaction bool
	// FirstSystem and FirstUser feed the session fingerprint.
	FirstSystem, FirstUser string

	anthropic bool
	body      []byte
	// system is the Raw of the system message Decode made, nil without one.
	system []byte
	// inputString is the Raw of the user message made from a string
	// input, kept as a string when it comes back unchanged.
	inputString []byte
}

// ErrNotConversation means the body is not a request Decode understands;
// the proxy forwards it unchanged.
var ErrNotConversation = errors.New("translate: not a conversation ctxproxy understands")

func notConversation(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNotConversation, fmt.Sprintf(format, args...))
}

// top reads a request body's top-level members.
func top(body []byte) (map[string][]byte, error) {
	v, err := jsonscan.Valid(body)
	if err != nil {
		return nil, notConversation("%v", err)
	}
	if jsonscan.KindOf(v) != jsonscan.KindObject {
		return nil, notConversation("the body is not an object")
	}
	return fields(v), nil
}

// decodeCommon reads model, stream and the output limit.
func (c *Conversation) decodeCommon(f map[string][]byte, maxKey string) error {
	if jsonscan.KindOf(f["model"]) != jsonscan.KindString {
		return notConversation("model is not a string")
	}
	c.Model = str(f["model"])
	c.Stream = string(f["stream"]) == "true"
	if n := f[maxKey]; isInteger(n) && n[0] != '-' {
		fmt.Sscan(string(n), &c.MaxOutput)
	}
	return nil
}

// systemMessage makes the leading system message for a system prompt
// token (a string, or an array of blocks whose text is text).
func (c *Conversation) systemMessage(tok []byte, text string) {
	c.system = append(append([]byte(`{"role":"system","content":`), tok...), '}')
	c.Messages = append(c.Messages, chat.Message{Role: "system", Content: text, Raw: c.system})
	c.FirstSystem = text
}

// annotations reads and removes ctxproxy's _preserve and _importance keys
// from an item or message object.
func (c *Conversation) annotations(obj []byte, m *chat.Message) []byte {
	f := fields(obj)
	p, hasP := f["_preserve"]
	i, hasI := f["_importance"]
	if !hasP && !hasI {
		return obj
	}
	c.Annotated = true
	m.Preserve = string(p) == "true"
	var imp float64
	if hasI && json.Unmarshal(i, &imp) == nil {
		m.Importance, m.HasImportance = min(max(imp, 0), 1), true
	}
	return removeMembers(obj, "_preserve", "_importance")
}

// texts joins the text of string tokens with "\n", as the translations
// join them for Ollama.
func texts(toks [][]byte) string {
	parts := make([]string, len(toks))
	for i, t := range toks {
		parts[i] = str(t)
	}
	return strings.Join(parts, "\n")
}

// Encode returns the request body with the conversation replaced by msgs
// (what a strategy kept, in order, with its markers and summaries).
// Every other byte of the body, and every message a strategy did not
// edit, is as the client sent it. The system message must still lead
// msgs, as strategies keep it.
func (c *Conversation) Encode(msgs []chat.Message) ([]byte, error) {
	out := c.body
	var err error
	if c.system != nil && len(msgs) > 0 && bytes.Equal(msgs[0].Raw, c.system) {
		if msgs[0].Edited {
			key := "instructions"
			if c.anthropic {
				key = "system"
			}
			val := fields(c.system)["content"]
			if out, err = setMember(out, key, editText(val, msgs[0].Content, textPart(c.anthropic))); err != nil {
				return nil, err
			}
		}
		msgs = msgs[1:]
	}
	if c.anthropic {
		return c.encodeMessages(out, msgs)
	}
	return c.encodeResponses(out, msgs)
}

// editText returns a content value holding text in place of the old one:
// a string stays a string; in an array of parts the first text part gets
// the text and other text parts go, so images and other parts stay.
func editText(old []byte, text string, isText func(typ string) bool) []byte {
	s := jsonscan.AppendString(nil, text)
	if jsonscan.KindOf(old) != jsonscan.KindArray {
		return s
	}
	out := []byte{'['}
	done := false
	n := 0
	_ = jsonscan.Elements(old, func(_ int, p []byte) error {
		if jsonscan.KindOf(p) == jsonscan.KindObject && isText(str(fields(p)["type"])) {
			if done {
				return nil
			}
			done = true
			var err error
			if p, err = setMember(p, "text", s); err != nil {
				return nil
			}
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = append(out, p...)
		return nil
	})
	if !done {
		return s
	}
	return append(out, ']')
}

// textPart reports which part types hold a message's text.
func textPart(anthropic bool) func(string) bool {
	if anthropic {
		return func(t string) bool { return t == "text" }
	}
	return func(t string) bool { return t == "input_text" || t == "output_text" || t == "text" }
}

// setMember returns obj with the member key's value replaced by val, or
// added at the end when obj has none.
func setMember(obj []byte, key string, val []byte) ([]byte, error) {
	if jsonscan.KindOf(obj) != jsonscan.KindObject {
		return nil, errNotObject
	}
	var start, end int
	found := false
	_ = jsonscan.Members(obj, func(k, v []byte) error {
		if jsonscan.KeyIs(k, key) {
			start, end, found = offsetIn(obj, v), offsetIn(obj, v)+len(v), true
		}
		return nil
	})
	out := make([]byte, 0, len(obj)+len(val)+len(key)+4)
	if found {
		out = append(out, obj[:start]...)
		out = append(out, val...)
		return append(out, obj[end:]...), nil
	}
	last := bytes.LastIndexByte(obj, '}')
	out = append(out, obj[:last]...)
	if jsonscan.SkipSpace(obj, 1) < last {
		out = append(out, ',')
	}
	out = jsonscan.AppendString(out, key)
	out = append(out, ':')
	out = append(out, val...)
	return append(out, obj[last:]...), nil
}

// removeMembers returns obj without the members named keys.
func removeMembers(obj []byte, keys ...string) []byte {
	out := []byte{'{'}
	n := 0
	_ = jsonscan.Members(obj, func(k, v []byte) error {
		for _, key := range keys {
			if jsonscan.KeyIs(k, key) {
				return nil
			}
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = append(out, k...)
		out = append(out, ':')
		out = append(out, v...)
		return nil
	})
	return append(out, '}')
}

// offsetIn is where part, a sub-slice of whole, starts in it.
func offsetIn(whole, part []byte) int { return cap(whole) - cap(part) }

// appendPlain writes a message ctxproxy made (a marker or a summary).
func appendPlain(dst []byte, role, content string) []byte {
	dst = append(dst, `{"role":`...)
	dst = jsonscan.AppendString(dst, role)
	dst = append(dst, `,"content":`...)
	dst = jsonscan.AppendString(dst, content)
	return append(dst, '}')
}
