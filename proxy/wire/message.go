package wire

// The messages of a chat request: read from their raw bytes (names by the
// backend's rules), and written back with only what a strategy changed.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/internal/imagesize"
	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

type wireToolCall struct {
	ID       string `json:"id"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type wirePart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// DecodeString decodes a JSON string value. One without escapes (the
// common case for long chat content) is not copied: the string shares v's
// bytes, so v must never change afterwards. Request bodies are never
// edited in place (Request.Rebuild copies), and a message's Raw already keeps
// its body alive wherever the message goes, so sharing adds no retention.
func DecodeString(v []byte) (string, error) {
	if len(v) > 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 {
		return unsafe.String(&v[1], len(v)-2), nil
	}
	if len(v) == 2 && v[0] == '"' {
		return "", nil
	}
	var s string
	err := json.Unmarshal(v, &s)
	return s, err
}

// messageError is the error of a request whose message i failed to
// decode with err.
func messageError(i int, err error) error {
	if amb := (*AmbiguousError)(nil); errors.As(err, &amb) {
		return fmt.Errorf("message %d: %w", i, err)
	}
	return fmt.Errorf("%w: message %d: %v", ErrNotChat, i, err)
}

// DecodeMessage reads the fields ctxproxy needs from one stored message
// object (one ctxproxy forwarded, its names resolved then). The caller
// has validated it, so values are scanned, not checked.
func DecodeMessage(raw json.RawMessage) (chat.Message, bool, error) {
	i := jsonscan.SkipSpace(raw, 0)
	dec := messageDecoder{fields: ollamaMessageFields, rules: JSONKeys}
	m, annotated, end, err := dec.decodeAt(raw, i)
	if err == nil && jsonscan.SkipSpace(raw, end) != len(raw) {
		err = errors.New("json: text after the message")
	}
	return m, annotated, err
}

// messageDecoder reads the messages of one request: their names by the
// request's rules, against the fields of its dialect's messages.
type messageDecoder struct {
	fields []field
	rules  KeyRules
	// lowerRole reads roles in lower case, as Ollama's api.Message does.
	lowerRole bool
}

// decodeAt decodes the message object at d[i] (valid JSON, like all of d)
// and returns the index just past it. The messages of a request are read
// in one walk of its array: each object is scanned once, not once to find
// its end and again for its members. annotated reports that the message's
// raw bytes differ from the request's: ctxproxy's annotations removed, or
// its names resolved.
func (dec messageDecoder) decodeAt(d []byte, i int) (m chat.Message, annotated bool, end int, err error) {
	var buf [8]Member // the members are not kept: no allocation for them
	ms, end, err := appendMembersAt(buf[:0], d, i)
	if err != nil {
		return chat.Message{}, false, 0, err
	}
	raw := d[i:end:end]
	for k := range ms { // offsets into raw
		ms[k].Start, ms[k].ValueStart, ms[k].End = ms[k].Start-i, ms[k].ValueStart-i, ms[k].End-i
	}
	resolved, err := resolveNames(raw, ms, dec.fields, dec.rules)
	if err != nil {
		return chat.Message{}, false, 0, err
	}
	if resolved != nil {
		if ms, err = Members(resolved); err != nil {
			return chat.Message{}, false, 0, err
		}
		raw = resolved
	}
	m, annotated, err = decodeMessageMembers(raw, ms)
	if dec.lowerRole && m.Role != strings.ToLower(m.Role) {
		m.Role = strings.ToLower(m.Role)
	}
	return m, annotated || resolved != nil, end, err
}

// decodeMessageMembers decodes the message object raw from its members,
// ms.
func decodeMessageMembers(raw []byte, ms []Member) (chat.Message, bool, error) {
	var err error
	m := chat.Message{Raw: raw}
	annotated := false
	for _, mem := range ms {
		v := raw[mem.ValueStart:mem.End]
		null := bytes.Equal(v, []byte("null"))
		switch mem.Key {
		case "role":
			m.Role, err = DecodeString(v)
		case "content":
			err = decodeContent(&m, v)
		case "name":
			if !null {
				m.Name, err = DecodeString(v)
			}
		case "tool_call_id":
			if !null {
				m.ToolCallID, err = DecodeString(v)
			}
		case "images":
			if v[0] == '[' {
				var sp [][2]int
				sp, err = elements(v)
				for _, e := range sp {
					m.Images = append(m.Images, imagesize.Of(v[e[0]:e[1]]))
				}
			}
		case "tool_calls":
			if !null {
				m.ToolCalls, err = decodeToolCalls(v)
			}
		case keyPreserve:
			annotated = true
			var b bool
			if json.Unmarshal(v, &b) == nil {
				m.Preserve = b
			}
		case keyImportance:
			annotated = true
			var f float64
			if json.Unmarshal(v, &f) == nil {
				m.Importance = min(max(f, 0), 1)
				m.HasImportance = true
			}
		}
		if err != nil {
			return chat.Message{}, false, fmt.Errorf("%s: %v", mem.Key, err)
		}
	}
	if m.Role == "" {
		return chat.Message{}, false, errors.New("message has no role")
	}
	if annotated {
		clean, err := RemoveMembers(raw, func(k string) bool { return k == keyPreserve || k == keyImportance })
		if err != nil {
			return chat.Message{}, false, err
		}
		m.Raw = clean
	}
	return m, annotated, nil
}

// decodeContent reads a string content, or the text parts of a parts
// array (counting its images).
func decodeContent(m *chat.Message, v []byte) error {
	switch v[0] {
	case 'n':
		return nil
	case '"':
		var err error
		m.Content, err = DecodeString(v)
		return err
	case '[':
		var parts []json.RawMessage
		if err := json.Unmarshal(v, &parts); err != nil {
			return err
		}
		var texts []string
		for _, p := range parts {
			var part wirePart
			if json.Unmarshal(p, &part) != nil {
				continue // an unknown part shape is the backend's business
			}
			switch part.Type {
			case "text", "input_text":
				texts = append(texts, part.Text)
			case "image_url", "input_image", "image":
				m.Images = append(m.Images, imagesize.Of(p))
			}
		}
		m.Content = strings.Join(texts, "\n")
		return nil
	}
	return errors.New("neither a string nor an array")
}

func decodeToolCalls(v []byte) ([]chat.ToolCall, error) {
	var calls []wireToolCall
	if err := json.Unmarshal(v, &calls); err != nil {
		return nil, err
	}
	out := make([]chat.ToolCall, 0, len(calls))
	for _, tc := range calls {
		call := chat.ToolCall{ID: tc.ID, Name: tc.Function.Name}
		args := tc.Function.Arguments
		if len(args) > 0 && args[0] == '"' {
			// OpenAI sends the arguments as a string of JSON.
			var s string
			if json.Unmarshal(args, &s) == nil {
				call.Arguments = s
			}
		} else if len(args) > 0 && !bytes.Equal(args, []byte("null")) {
			call.Arguments = string(args)
		}
		out = append(out, call)
	}
	return out, nil
}

// EncodeMessages returns the JSON array for msgs: each message's raw bytes
// when it has them, its edited form when a strategy changed its content,
// and a plain {"role","content"} object for messages ctxproxy made.
func EncodeMessages(msgs []chat.Message) ([]byte, error) {
	size := 2
	for i := range msgs {
		// An edited message is written from its (shorter) content, not
		// its raw bytes: a 30 MB message cut to fit must not cost a
		// 30 MB buffer.
		if m := &msgs[i]; m.Raw != nil && !m.Edited {
			size += len(m.Raw) + 1
		} else {
			size += len(m.Content) + 64
		}
	}
	out := make([]byte, 0, size)
	out = append(out, '[')
	for i := range msgs {
		if i > 0 {
			out = append(out, ',')
		}
		b, err := EncodeMessage(&msgs[i])
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return append(out, ']'), nil
}

func EncodeMessage(m *chat.Message) ([]byte, error) {
	if m.Raw == nil {
		out := append([]byte(`{"role":`), marshalString(m.Role)...)
		out = append(out, `,"content":`...)
		out = append(out, marshalString(m.Content)...)
		return append(out, '}'), nil
	}
	if !m.Edited {
		return m.Raw, nil
	}
	content, err := editedContent(m)
	if err != nil {
		return nil, err
	}
	return SetMember(m.Raw, "content", content)
}

// editedContent is the new "content" value of an edited message. A parts
// array keeps its non-text parts (images stay attached) and gets the new
// text as its first text part.
func editedContent(m *chat.Message) ([]byte, error) {
	text := marshalString(m.Content)
	ms, err := Members(m.Raw)
	if err != nil {
		return nil, err
	}
	cm, ok := FindMember(ms, "content")
	if !ok || m.Raw[cm.ValueStart] != '[' {
		return text, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(m.Raw[cm.ValueStart:cm.End], &parts); err != nil {
		return text, nil
	}
	out := []byte(`[{"type":"text","text":`)
	out = append(out, text...)
	out = append(out, '}')
	for _, p := range parts {
		var part wirePart
		if json.Unmarshal(p, &part) == nil && (part.Type == "text" || part.Type == "input_text") {
			continue
		}
		out = append(out, ',')
		out = append(out, p...)
	}
	return append(out, ']'), nil
}
